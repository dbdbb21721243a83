"""Every hook spec names what it is given and what it answers in real types (#48): a plugin
author reads ``ctx: WorkerContext``, ``config: RunConfig``, ``-> FaultInjector | None``, and
mypy checks a hookimpl written to them, where ``Any`` said nothing. The built-in plugins'
hookimpls take exactly the spec's types, as a third-party plugin copying them would."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import pytest

from xirang_core import hookspecs
from xirang_core.contract import RunConfig
from xirang_core.parallel.plan import ModelShape, ParallelPlan
from xirang_core.plugins import get_registry

#: the names the spec module (and a plugin) imports for annotations only (under TYPE_CHECKING)
ANNOTATION_ONLY = {"RunConfig": RunConfig, "ParallelPlan": ParallelPlan, "ModelShape": ModelShape}
SPECS = {name: getattr(hookspecs, name) for name in dir(hookspecs) if name.startswith("xirang_")}


def spec_hints(name: str) -> dict[str, Any]:
    return typing.get_type_hints(SPECS[name], localns=ANNOTATION_ONLY)


def mentions_any(hint: Any) -> bool:
    """Whether ``hint`` is ``Any`` or holds it (``dict[str, Any]``, ``Any | None``)."""
    return hint is Any or any(mentions_any(arg) for arg in typing.get_args(hint))


def test_no_hook_spec_takes_or_answers_any() -> None:
    assert len(SPECS) >= 26
    loose = [
        f"{name}: {arg}"
        for name in SPECS
        for arg, hint in spec_hints(name).items()
        if mentions_any(hint)
    ]
    assert loose == []


def built_in_hookimpls() -> list[tuple[str, str, Callable[..., Any]]]:
    """(hook, plugin, function) for every built-in plugin's implementation of a hook that is
    given arguments (the registration hooks take none)."""
    registry = get_registry()
    return [
        (name, impl.plugin_name, impl.function)
        for name in SPECS
        if spec_hints(name).keys() - {"return"}
        for impl in getattr(registry.hook, name).get_hookimpls()
        if impl.function.__module__.startswith("xirang")
    ]


@pytest.mark.parametrize(("hook", "plugin", "function"), built_in_hookimpls())
def test_a_built_in_hookimpl_takes_the_types_its_spec_names(
    hook: str, plugin: str, function: Callable[..., Any]
) -> None:
    spec = spec_hints(hook)
    given = typing.get_type_hints(function, localns=ANNOTATION_ONLY)
    answer = given.pop("return", None)
    assert given == {arg: spec[arg] for arg in given}, f"{plugin}'s {hook}"
    assert not mentions_any(answer), f"{plugin}'s {hook} answers {answer}"
