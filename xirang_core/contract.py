"""The run's contract: the validated config as a frozen, typed :class:`RunConfig`.

``validate()`` checks the composed config once and hands every later stage a read-only
mapping: ``cfg["trainer"]["max_steps"]`` reads as before, ``cfg.trainer.max_steps`` reads the
same value typed by the section's schema, and any write raises :class:`FrozenConfigError`. A
stage that learns something after validation (the device ``auto`` chose, the plan, the data's
pins, the runtime facts) derives a new config with :meth:`RunConfig.replace`, so what one
stage was given never changes under another. The containers are ``dict`` and ``list``
subclasses so that reading code, JSON, YAML (``config.yaml``) and pickling (spawned workers)
see the same data as the plain dict they replace.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import yaml

from xirang_core.checkpoint.config import CheckpointConfig
from xirang_core.errors import XirangError
from xirang_core.sweep.objective import SweepConfig

T = TypeVar("T")


class FrozenConfigError(XirangError, TypeError):
    """A write to a validated config: derive a new one with :meth:`RunConfig.replace`."""


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise FrozenConfigError(
        "the run's config is read-only after validation; derive a changed copy with "
        "config.replace(section=...) or carry what the run learned in a record of its own"
    )


def freeze(value: Any) -> Any:
    """``value`` with every mapping and list in it read-only (scalars as they are)."""
    if isinstance(value, Mapping) and not isinstance(value, FrozenDict):
        return FrozenDict(value)
    if isinstance(value, list | tuple) and not isinstance(value, FrozenList):
        return FrozenList(value)
    return value


def thaw(value: Any) -> Any:
    """A plain, writable copy of ``value``: dicts and lists all the way down."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value


class FrozenList(list[Any]):
    """A read-only list: equal to, and serialised as, the list it holds."""

    def __init__(self, items: Iterable[Any] = ()) -> None:
        super().__init__(freeze(v) for v in items)

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (thaw(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


class FrozenDict(dict[str, Any]):
    """A read-only mapping: equal to, and serialised as, the dict it holds; nested mappings
    and lists read-only too."""

    def __init__(self, items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        super().__init__((k, freeze(v)) for k, v in dict(items).items())

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (thaw(self),))

    def __or__(self, other: Any) -> dict[str, Any]:  # type: ignore[override]
        return {**self, **other}

    __setitem__ = __delitem__ = __ior__ = _refuse  # type: ignore[assignment]
    setdefault = update = pop = popitem = clear = _refuse  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """A plain, writable copy (for code that builds a changed config)."""
        return thaw(self)  # type: ignore[no-any-return]


def _represent(dumper: yaml.SafeDumper, data: Any) -> Any:
    if isinstance(data, dict):
        return dumper.represent_dict(data)
    return dumper.represent_list(data)


for _dumper in (yaml.SafeDumper, yaml.Dumper):  # config.yaml reads the same as the plain dict
    _dumper.add_multi_representer(FrozenDict, _represent)  # and RunConfig
    _dumper.add_multi_representer(FrozenList, _represent)


@dataclass(frozen=True)
class ProfileConfig:
    """``trainer.profile``: torch.profiler over steps ``[start, end]`` (empty: off)."""

    steps: list[int] = field(default_factory=list)
    top: int = 15  # operators printed at the end, by time
    memory: bool = True  # record tensor allocations (the trace's memory view)


@dataclass(frozen=True)
class TrainerConfig:
    max_steps: int = 300
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    global_batch: int = 16
    micro_batch: int = 0
    grad_accum: int = 0
    log_every: int = 10
    grad_clip: float = 1.0
    max_restarts: int = 0
    threads: int = 0
    sample_tokens: int = 200
    sample_prompt: str = "def "
    precision: str = "fp32"
    compile: bool = False
    eval_every: int = 0
    eval_batches: int = 8
    nonfinite: str = "stop"
    comm_timeout_s: int = 600
    gc_every: int = 50
    profile: ProfileConfig = field(default_factory=ProfileConfig)


@dataclass(frozen=True)
class OptimConfig:
    name: str = "adamw"
    lr: float = 3e-3
    min_lr: float = 3e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    warmup_steps: int = 20


def typed(schema: type[T], values: Mapping[str, Any]) -> T:
    """``values`` as an instance of the dataclass ``schema``, nested dataclasses built too; keys
    the schema does not name (what a later stage added) are left out."""
    hints = typing.get_type_hints(schema)
    kwargs = {}
    for f in dataclasses.fields(schema):  # type: ignore[arg-type]
        if f.name not in values:
            continue
        value, hint = values[f.name], hints[f.name]
        nested = dataclasses.is_dataclass(hint) and isinstance(value, Mapping)
        kwargs[f.name] = typed(hint, value) if nested else thaw(value)  # type: ignore[arg-type]
    return schema(**kwargs)


class RunConfig(FrozenDict):
    """A run's validated config, read-only: index it as the dict it was (``cfg["data"]``),
    or read a core section typed (``cfg.trainer.max_steps``)."""

    def replace(self, **sections: Any) -> RunConfig:
        """A new config with ``sections`` replaced (or added); this one is unchanged."""
        return RunConfig({**self, **sections})

    def section(self, schema: type[T], name: str) -> T:
        """Section ``name`` typed as the dataclass ``schema``."""
        return typed(schema, self.get(name) or {})

    @property
    def trainer(self) -> TrainerConfig:
        return self.section(TrainerConfig, "trainer")

    @property
    def optim(self) -> OptimConfig:
        return self.section(OptimConfig, "optim")

    @property
    def checkpoint(self) -> CheckpointConfig:
        return self.section(CheckpointConfig, "checkpoint")

    @property
    def sweep(self) -> SweepConfig:
        return self.section(SweepConfig, "sweep")


#: the core sections, each checked against its schema by ``validate()``
CORE_SCHEMAS: dict[str, type] = {
    "trainer": TrainerConfig,
    "optim": OptimConfig,
    "checkpoint": CheckpointConfig,
    "sweep": SweepConfig,
}

__all__ = [
    "CORE_SCHEMAS",
    "FrozenConfigError",
    "FrozenDict",
    "FrozenList",
    "OptimConfig",
    "ProfileConfig",
    "RunConfig",
    "TrainerConfig",
    "freeze",
    "thaw",
]
