"""Defaults of the protocols' optional members, in base classes plugins inherit.

A class that inherits none of them (written before a member existed) is given the defaults by
:func:`with_defaults` when the registry loads it, so the core never probes for a member."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, TypeVar, cast

from xirang_core.errors import ConfigError
from xirang_core.specs.records import StepRunner

if TYPE_CHECKING:
    from xirang_core.specs.records import WorkerContext

T = TypeVar("T")


class DeviceBackendBase:
    """Defaults of :class:`DeviceBackend`'s optional members; a backend class inherits them."""

    shareable: bool = False
    torch_type: str = "cpu"

    def supports_dtype(self, name: str) -> bool:
        return name == "float32"

    def caveats(self) -> list[str]:
        return []

    def present(self) -> tuple[bool, str]:
        """A backend with no torch-free reading of its hardware answers as ``detect`` does."""
        return cast(Any, self).detect()


class StrategyBase:
    """Defaults of :class:`Strategy`'s optional members; a strategy class inherits them."""

    compiles: bool = False
    splits_model: bool = False
    optimizer: Any = None
    trained: Any = None

    def build_mesh(self, ctx: WorkerContext) -> Any:
        return None

    def shards_parameters(self, ctx: WorkerContext) -> bool:
        return False

    def runner(self, wrapped: Any) -> StepRunner:
        return legacy_runner(wrapped)


#: the attributes of the deprecated :class:`~xirang_core.specs.TrainedModule`, per runner field
LEGACY_RUNNER = {
    "step": "xirang_step",
    "evaluate": "xirang_eval",
    "backward": "xirang_backward",
    "clip": "xirang_clip",
}


def legacy_runner(wrapped: Any) -> StepRunner:
    """The step runner of a strategy written before ``runner`` existed, from the attributes it
    set on its module (:class:`~xirang_core.specs.TrainedModule`); it warns when there are any."""
    found = {f: getattr(wrapped, a) for f, a in LEGACY_RUNNER.items() if hasattr(wrapped, a)}
    if found:
        warnings.warn(
            f"{type(wrapped).__name__} carries {', '.join(LEGACY_RUNNER[f] for f in found)}: "
            "a strategy now returns a StepRunner from runner(wrapped); the attributes are read "
            "for one more release",
            DeprecationWarning,
            stacklevel=2,
        )
    return StepRunner(**found)


class SchedulerBase:
    """Defaults of :class:`Scheduler`'s optional members; a scheduler class inherits them."""

    detached: bool = False
    resolves_runtime: bool = False


class CommBackendBase:
    """Defaults of :class:`CommBackend`'s optional members; a comm option inherits them."""

    def report(self, steps: int) -> dict[str, Any] | None:
        return None


class ModelBase:
    """Defaults of :class:`Model`'s optional members; a model family's module inherits them
    (beside ``torch.nn.Module``)."""

    param_init_threadsafe: bool = True
    document_mask: bool = False

    def init_buffers(self) -> None:
        return None

    def after_weights(self) -> None:
        return None


class SplitPlanBase:
    """Defaults of :class:`SplitPlan`'s optional members; a split plan class inherits them."""

    def compile_head(self, model: Any) -> None:
        return None

    def fsdp_units(self, model: Any) -> list[list[Any]]:
        return []


class HFInteropBase:
    """Defaults of :class:`HFInterop`'s optional members; a family's mapping inherits them."""

    def save_adapter(self, settings: dict[str, Any], state: dict[str, Any], out: Any) -> int:

        raise ConfigError(
            "--format peft: this model family trains no adapters; use --format hf for its weights"
        )

    def from_torchtitan(
        self, settings: dict[str, Any], tensors: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        raise ConfigError("this model family has no mapping of torchtitan's names")

    def to_torchtitan(
        self, settings: dict[str, Any], tensors: dict[str, Any], fused: bool
    ) -> dict[str, Any]:
        raise ConfigError("--format torchtitan: this model family has no torchtitan mapping")


class SettingsBase:
    """Defaults of a ``schema``'s optional members (an :class:`ImplSpec`'s settings dataclass):
    what its field types cannot say, checked when the config is composed."""

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The checked settings with derived values filled (a range checked, a file read)."""
        return settings

    @staticmethod
    def check(config: dict[str, Any]) -> None:
        """A strategy's check of the whole run config (the model family it can split)."""
        return None

    @staticmethod
    def check_run(config: dict[str, Any]) -> None:
        """A model family's check of the whole run config (the strategies its adapters run
        under); a family's ``check`` checks its own settings."""
        return None


#: the class of defaults per spec kind (kinds without optional members have none)
DEFAULTS: dict[str, type] = {
    "device": DeviceBackendBase,
    "parallel": StrategyBase,
    "scheduler": SchedulerBase,
    "comm": CommBackendBase,
    "model": ModelBase,
}


def with_defaults(target: T, base: type | None) -> T:
    """``target`` (an implementation class, or an instance of one) with each optional member
    of ``base`` it lacks taken from ``base``: the kernel then calls every member of a protocol
    without probing. Built-in plugins inherit ``base``; a third-party class written before a
    member existed gets it added to the class once, when the registry loads it."""
    cls = target if isinstance(target, type) else type(target)
    if base is None or issubclass(cls, base):
        return target
    for name, value in vars(base).items():
        if not name.startswith("__") and not hasattr(cls, name):
            setattr(cls, name, value)
    return target
