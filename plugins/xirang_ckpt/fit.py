"""A foreign checkpoint brought to the model that will resume it (``xirang ckpt import
--model``): torchtitan's names mapped by the model family, every name and shape checked
against the model, and the optimizer's settings regrouped into the param groups this run's
optimizer builds (xirang: matrices, then vectors), so a resume loads without surprises.

What does not fit is refused here, naming the keys, rather than at resume time. ``--model-only``
takes the weights alone; the resumed run's optimizer starts afresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from xirang import ConfigError
from xirang.parallel import group_params

#: how many names an error lists before saying how many more there are
SHOWN = 6


@dataclass
class TargetModel:
    """The model a checkpoint is brought in for: its ``model`` config section (``family`` and
    the family's settings, as a run names them)."""

    section: dict[str, Any]
    registry: Any

    @property
    def settings(self) -> dict[str, Any]:
        return {k: v for k, v in self.section.items() if k not in ("family", "name")}

    def spec(self) -> Any:
        if "family" not in self.section:
            raise ConfigError(
                "--model needs family=<name> (e.g. --model family=llama dim=64 n_heads=4)"
            )
        return self.registry.spec("model", self.section["family"])

    def interop(self) -> Any:
        """The family's mapping to other layouts (its Hugging Face mapping)."""
        interop = self.spec().load_hf()
        if interop is None:
            raise ConfigError(f"model family '{self.section['family']}' has no layout mapping")
        return interop

    def build(self) -> torch.nn.Module:
        """The model on the meta device: its names and shapes, no memory."""
        spec = self.spec()
        schema = spec.load_schema()
        try:
            settings = schema(**self.settings) if schema is not None else self.settings
        except TypeError as exc:
            raise ConfigError(f"--model: {exc}") from None
        with torch.device("meta"):
            try:
                return spec.load()(settings)
            except ValueError as exc:
                raise ConfigError(f"--model: {exc}") from None


def names(keys: list[str]) -> str:
    """Keys for an error: the first few, and how many more."""
    more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return ", ".join(keys[:SHOWN]) + more


def per_parameter(settings: dict[str, dict[str, Any]], groups: list[dict] | None) -> dict:
    """The optimizer's settings of each parameter, by name, from either layout."""
    if groups is None:
        return settings
    return {n: {k: v for k, v in g.items() if k != "params"} for g in groups for n in g["params"]}


def renamed(rename: Any, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (anything, by parameter name) under the names ``rename`` gives a dict of
    tensors, found by passing it each name's index as a 0-d tensor."""
    keys = list(values)
    moved = rename({k: torch.tensor(i) for i, k in enumerate(keys)})
    return {name: values[keys[int(index)]] for name, index in moved.items()}


def by_field(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Optimizer state by field (``exp_avg``) then parameter name, for a mapping of tensors."""
    fields: dict[str, dict[str, Any]] = {}
    for name, entries in state.items():
        for key, value in entries.items():
            fields.setdefault(key, {})[name] = value
    return fields


def by_name(fields: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The inverse of :func:`by_field`."""
    state: dict[str, dict[str, Any]] = {}
    for key, values in fields.items():
        for name, value in values.items():
            state.setdefault(name, {})[key] = value
    return state


def from_titan(
    target: TargetModel, model: dict[str, Any], state: dict, settings: dict
) -> tuple[dict[str, Any], dict, dict]:
    """Model tensors, optimizer state and settings under the target's names, from
    torchtitan's (the family's mapping; any name it does not know is refused)."""
    interop, family = target.interop(), target.settings

    def rename(tensors: dict[str, Any]) -> dict[str, Any]:
        out, unknown = interop.from_torchtitan(family, tensors)
        if unknown:
            raise ConfigError(
                f"torchtitan's {names(sorted(unknown))}: no parameter of model family "
                f"'{target.section['family']}' takes them; nothing was imported"
            )
        return dict(out)

    fields = {key: rename(values) for key, values in by_field(state).items()}
    return rename(model), by_name(fields), renamed(rename, settings)


def check_model(model: dict[str, Any], wanted: dict[str, torch.Tensor]) -> None:
    """Refuse model tensors whose names or shapes are not the target model's."""
    missing = sorted(set(wanted) - set(model))
    extra = sorted(set(model) - set(wanted))
    shapes = sorted(
        f"{n} {tuple(model[n].shape)} (the model's: {tuple(wanted[n].shape)})"
        for n in set(model) & set(wanted)
        if tuple(model[n].shape) != tuple(wanted[n].shape)
    )
    problems = [
        f"the model needs {names(missing)}, which the checkpoint lacks" if missing else "",
        f"no parameter of the model takes {names(extra)}" if extra else "",
        f"shapes differ: {names(shapes)}" if shapes else "",
    ]
    if any(problems):
        raise ConfigError(
            "the checkpoint does not fit the model given: "
            + "; ".join(p for p in problems if p)
            + "; nothing was imported"
        )


def regroup(settings: dict[str, dict[str, Any]], groups: list[list[str]]) -> list[dict]:
    """The optimizer's param groups as the target builds them (``groups``: the names of
    each), each taking its members' settings; refused where members of one group were trained
    with different settings, or a parameter has none."""
    missing = sorted(n for members in groups for n in members if n not in settings)
    extra = sorted(set(settings) - {n for members in groups for n in members})
    if missing or extra:
        raise ConfigError(
            "the checkpoint's optimizer does not fit the model given: "
            + (f"no optimizer settings for {names(missing)}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"settings for {names(extra)}, not parameters of it" if extra else "")
            + "; import with --model-only to start the optimizer afresh"
        )
    fallback = next(iter(settings.values()), {})
    return [_group(settings, members, fallback) for members in groups]


def _group(settings: dict, members: list[str], fallback: dict[str, Any]) -> dict[str, Any]:
    """One param group of ``members``, its settings theirs (``fallback`` when it has none)."""
    first = members[0] if members else None
    common = settings[first] if first is not None else fallback
    for name in members[1:]:
        other = settings[name]
        differs = sorted(k for k in set(common) | set(other) if not same_setting(common, other, k))
        if differs:
            raise ConfigError(
                f"the checkpoint's optimizer trained {first} and {name} with different "
                f"{', '.join(differs)}, which this run's optimizer keeps in one param group; "
                f"import with --model-only to start the optimizer afresh"
            )
    return {**common, "params": list(members)}


def same_setting(a: dict[str, Any], b: dict[str, Any], key: str) -> bool:
    """Whether two parameters' settings agree on ``key`` (tensors compared by value)."""
    if key not in a or key not in b:
        return False
    x, y = a[key], b[key]
    if torch.is_tensor(x) or torch.is_tensor(y):
        return torch.is_tensor(x) and torch.is_tensor(y) and torch.equal(x, y)
    return bool(x == y)


def fit(
    target: TargetModel,
    model: dict[str, Any],
    state: dict[str, dict[str, Any]],
    settings: dict[str, dict[str, Any]],
    model_only: bool,
) -> dict[str, Any]:
    """``{"model": ..., "optim": ...}`` (no ``optim`` when ``model_only``) in the target
    model's names and param groups; ConfigError naming what does not fit."""
    built = target.build()
    check_model(model, built.state_dict())
    if model_only:
        return {"model": model}
    groups = [[name for name, _ in members] for members in group_params(built)]
    stray = sorted(set(state) - {n for members in groups for n in members})
    if stray:
        raise ConfigError(
            f"the checkpoint's optimizer holds state for {names(stray)}, not trainable "
            f"parameters of the model given; import with --model-only to start it afresh"
        )
    return {"model": model, "optim": {"state": state, "param_groups": regroup(settings, groups)}}
