"""Pool policies are their own plugin kind (``xirang_pool_policies``, ``PolicySpec``); one
registered the old way, a ``PoolPolicySpec`` scheduler named ``pool-<name>``, still loads for
one release, warned."""

from __future__ import annotations

import sys
import types
from typing import ClassVar

import pytest

from xirang.pool import Policy, PoolPolicySpec
from xirang.specs import PolicySpec
from xirang.testing import registry_with
from xirang_service.pool import policy as policies


class Tallest(Policy):
    name: ClassVar[str] = "tallest"

    def rank(self, job, level):  # type: ignore[no-untyped-def]
        return (-job.cards, job.submitted, job.id)


def _plugin(name: str, **hooks: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.Tallest = Tallest  # type: ignore[attr-defined]
    module.__dict__.update(hooks)
    sys.modules[name] = module
    return module


@pytest.fixture
def with_plugin(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def use(module: types.ModuleType) -> None:
        registry = registry_with(module)
        monkeypatch.setattr("xirang_core.plugins.get_registry", lambda: registry)

    return use


def test_the_built_in_policies_are_of_the_policy_kind() -> None:
    assert set(policies.policy_names()) >= {"fifo", "fifo-backfill", "priority", "hetero"}
    assert policies.load_policy("priority").name == "priority"


def test_a_policy_of_the_new_kind_loads_by_its_name(with_plugin) -> None:
    from xirang import hookimpl

    new = _plugin("tallest_new")
    new.xirang_pool_policies = hookimpl(  # type: ignore[attr-defined]
        lambda: [PolicySpec(name="tallest", target="tallest_new:Tallest")]
    )
    with_plugin(new)
    assert "tallest" in policies.policy_names()
    assert isinstance(policies.load_policy("tallest"), Tallest)


def test_a_policy_registered_the_old_way_still_loads_with_a_warning(with_plugin) -> None:
    from xirang import hookimpl

    old = _plugin("tallest_old")
    old.xirang_schedulers = hookimpl(  # type: ignore[attr-defined]
        lambda: [PoolPolicySpec(name="pool-tallest", target="tallest_old:Tallest")]
    )
    with_plugin(old)
    assert "tallest" in policies.policy_names()
    with pytest.warns(DeprecationWarning, match="register a PolicySpec through"):
        assert isinstance(policies.load_policy("tallest"), Tallest)
