"""The spec types: what each kind's registration hook returns.

Registration hooks return *specs*: small frozen records that name an implementation by import
path instead of holding it. The core can then list every option cheaply (``xirang plugins`` never
imports torch or a vendor library) and import an implementation only when a run selects it. A spec
whose ``requires`` modules are missing stays listed, marked unavailable with the install hint.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from xirang_core.specs.defaults import HFInteropBase, SettingsBase, SplitPlanBase, with_defaults

if TYPE_CHECKING:
    from xirang_core.specs.protocols import SplitPlan


@dataclass(frozen=True)
class ImplSpec:
    """One named implementation a plugin offers.

    ``target`` is ``"package.module:Attribute"``; ``schema`` (optional, same form) is a dataclass
    whose fields the config group option is validated against; ``requires`` lists importable
    module names without which the implementation cannot run, and ``install`` tells the user how
    to get them. ``tools`` lists the programs it runs (``sbatch``): without them on PATH it is
    installed but not usable here.
    """

    kind: ClassVar[str] = "implementation"

    name: str
    target: str
    description: str = ""
    schema: str | None = None
    requires: tuple[str, ...] = ()
    install: str = ""
    tools: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        """The required modules that cannot be found, without importing anything."""
        return [mod for mod in self.requires if not _module_exists(mod)]

    def missing_tools(self) -> list[str]:
        """The programs it runs that are not on PATH."""

        return [tool for tool in self.tools if shutil.which(tool) is None]

    def load(self) -> Any:
        """Import and return the implementation (a class or factory)."""
        return import_target(self.target)

    def load_schema(self) -> type[SettingsBase] | None:
        """The settings dataclass, with :class:`SettingsBase`'s defaults where it has none."""
        return with_defaults(import_target(self.schema), SettingsBase) if self.schema else None


@dataclass(frozen=True)
class DeviceBackendSpec(ImplSpec):
    """A device family (cpu, cuda, rocm, ascend). Higher ``priority`` wins for ``device=auto``."""

    kind: ClassVar[str] = "device"
    priority: int = 0


@dataclass(frozen=True)
class StrategySpec(ImplSpec):
    """A parallel strategy. ``multi_process`` says whether it needs a process group."""

    kind: ClassVar[str] = "parallel"
    multi_process: bool = True


@dataclass(frozen=True)
class StorageTierSpec(ImplSpec):
    """A storage tier; ``protocols`` are the fsspec URL schemes it serves (``file``, ``s3``)."""

    kind: ClassVar[str] = "storage"
    protocols: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommBackendSpec(ImplSpec):
    """A collective backend or gradient-sync option; ``device_types`` it can serve."""

    kind: ClassVar[str] = "comm"
    device_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerSpec(ImplSpec):
    """A scheduler: places a job and runs it through an executor.

    A scheduler whose cluster can also run the pool's placed jobs names, as
    ``"module:Class"`` / ``"module:function"``, the ``executor`` the pool service starts them
    with (``xirang pool serve --executor <name>``) and the ``inventory`` that lists the
    cluster's nodes as a cluster file's ``nodes:`` when the pool is given none."""

    kind: ClassVar[str] = "scheduler"
    executor: str = ""
    inventory: str = ""


@dataclass(frozen=True)
class CostPolicySpec(ImplSpec):
    """A cost policy: prices device time and enforces budgets."""

    kind: ClassVar[str] = "cost"


@dataclass(frozen=True)
class ModelSpec(ImplSpec):
    """A model family; ``target`` builds the module from its config section.

    ``parallelize`` (optional, ``"module:Class"``) names the family's own split plan: how its
    layers shard for tensor parallel, cut into pipeline stages, and what shape the planner
    sees. Without it the family runs only unsplit strategies (single, ddp).
    """

    kind: ClassVar[str] = "model"
    parallelize: str = ""
    #: optional ``"module:Class"``: the family's Hugging Face mapping (:class:`HFInterop`), used
    #: by ``xirang ckpt export --format hf`` and ``model.pretrained=<dir>``
    hf: str = ""
    #: the tokenizer option (``tokenizer=<name>``) the family is written for, if only one
    #: fits it (a byte-level model: ``"bytes"``); a run that names no tokenizer takes it
    tokenizer: str = ""

    def load_parallelize(self) -> SplitPlan:
        """An instance of the family's split plan, :class:`SplitPlanBase`'s defaults filled."""
        return with_defaults(import_target(self.parallelize)(), SplitPlanBase)

    def load_hf(self) -> Any:
        """An instance of the family's Hugging Face mapping, or None if it has none."""
        return with_defaults(import_target(self.hf)(), HFInteropBase) if self.hf else None


@dataclass(frozen=True)
class TokenizerSpec(ImplSpec):
    """A tokenizer (``tokenizer=<name>``); ``target`` is a :class:`Tokenizer` class."""

    kind: ClassVar[str] = "tokenizer"


@dataclass(frozen=True)
class TrackerSpec(ImplSpec):
    """An experiment tracker (``tracker=[<name>,...]``); ``target`` is a :class:`Tracker`."""

    kind: ClassVar[str] = "tracker"


@dataclass(frozen=True)
class CommandSpec(ImplSpec):
    """A ``xirang <name>`` subcommand; ``target`` is a ``main(argv: list[str]) -> int``."""

    kind: ClassVar[str] = "command"


@dataclass(frozen=True)
class OptimizerSpec(ImplSpec):
    """An optimizer (``optim.name=<name>``); ``target`` is an :class:`Optimizer` factory."""

    kind: ClassVar[str] = "optimizer"


@dataclass(frozen=True)
class LRScheduleSpec(ImplSpec):
    """A learning-rate schedule (``schedule=<name>``); ``target`` is an :class:`LRSchedule`
    class, built with the ``schedule`` group's settings (checked against ``schema``)."""

    kind: ClassVar[str] = "schedule"


@dataclass(frozen=True)
class PlannerSpec(ImplSpec):
    """What ``parallel=auto`` asks (``parallel.planner=<name>``); ``target`` is a
    :class:`~xirang_core.parallel.planning.Planner` class."""

    kind: ClassVar[str] = "planner"


@dataclass(frozen=True)
class DatasetSpec(ImplSpec):
    """A dataset (``data=<name>``); ``target`` is a :class:`~xirang_core.data.interface.Dataset`
    class, the protocol beside the step loader it feeds."""

    kind: ClassVar[str] = "dataset"


@dataclass(frozen=True)
class PolicySpec(ImplSpec):
    """A scheduling policy of the pool service (``xirang pool serve --policy <name>``);
    ``target`` is a :class:`~xirang_core.specs.PoolPolicy` class (the service's ``Policy``)."""

    kind: ClassVar[str] = "policy"


#: the option that asks xirang to choose (``device=auto``, ``comm=auto``, ``parallel=auto``)
AUTO = "auto"

SPEC_KINDS: tuple[type[ImplSpec], ...] = (
    DeviceBackendSpec,
    StrategySpec,
    StorageTierSpec,
    CommBackendSpec,
    SchedulerSpec,
    CostPolicySpec,
    ModelSpec,
    TokenizerSpec,
    TrackerSpec,
    CommandSpec,
    OptimizerSpec,
    LRScheduleSpec,
    PlannerSpec,
    DatasetSpec,
    PolicySpec,
)


def import_target(target: str) -> Any:
    """Import ``"module:attr.sub"`` and return the attribute."""
    module_name, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return obj


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
