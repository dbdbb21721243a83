"""Plain data the core and plugins exchange: hardware, jobs, prices, a run's text, a worker."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from xirang_core.errors import ConfigError

if TYPE_CHECKING:  # the contract sits above the specs: its type only
    from xirang_core.contract import RunConfig

#: a JSON value: what a run's ``summary.json`` (and a hook given its summary) holds
JsonValue: TypeAlias = "str | int | float | bool | list[JsonValue] | dict[str, JsonValue] | None"


@dataclass(frozen=True)
class DeviceInfo:
    """One accelerator (or the host CPU as a whole) as inventory reports it."""

    type: str
    index: int
    model: str
    memory_bytes: int
    driver: str = ""
    runtime: str = ""
    pci_bus_id: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class InterconnectGroup:
    """Devices that share one link class (``nvlink``, ``xgmi``, ``hccs``, ``pcie``, ``node``)."""

    name: str
    link: str
    devices: tuple[int, ...]
    bandwidth_gbps: float | None = None


@dataclass(frozen=True)
class Topology:
    """How a node's devices are linked; the planner, comm hooks and pool read the groups."""

    groups: tuple[InterconnectGroup, ...] = ()

    def group_of(self, device: int) -> InterconnectGroup | None:
        """The fastest-link group holding ``device`` (groups are listed fastest first)."""
        return next((g for g in self.groups if device in g.devices), None)


@dataclass(frozen=True)
class HealthFinding:
    """One health probe result; ``severity`` is ``ok``, ``warn`` or ``drain``."""

    device: int | None
    check: str
    severity: str
    message: str


@dataclass(frozen=True)
class Calibration:
    """Measured performance of one device: the baseline for MFU, logical cards and the planner."""

    device_model: str
    matmul_tflops: Mapping[str, float]
    memory_bandwidth_gbps: float
    link_bandwidth_gbps: float | None = None
    measured_at: str = ""
    key: str = ""
    #: the host's load average when each dtype's matmul figure (the best kept) was measured
    measured_load: Mapping[str, float] = field(default_factory=dict)
    #: dtypes whose figure was measured on a busy host, there being no quiet measurement yet
    measured_busy: Sequence[str] = ()

    def peak_flops(self, dtype: str = "float32") -> float:
        """Measured FLOP/s for ``dtype``; falls back to the best dtype measured."""
        tflops = self.matmul_tflops.get(dtype) or max(self.matmul_tflops.values(), default=0.0)
        return tflops * 1e12


@dataclass(frozen=True)
class JobSpec:
    """What a scheduler needs to run one training job: the run directory holds the config."""

    run_dir: str
    nproc: int
    project: str = "default"
    max_restarts: int = 0
    #: torchrun's multi-node form (``trainer.nnodes``/``node_rank``/``rdzv_endpoint``): this
    #: launcher is node ``node_rank`` of ``nnodes`` running the same command
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""


@dataclass(frozen=True)
class CostQuote:
    """The price of device time under a policy, in the policy's currency."""

    device_type: str
    devices: int
    seconds: float
    amount: float
    currency: str = "USD"


@dataclass(frozen=True)
class TextCorpus:
    """A run's pinned snapshot as text: what :meth:`Tokenizer.prepare` may train on.

    ``batches()`` yields the documents' texts, a list per shard, in the snapshot's stored order
    (read afresh on each call); ``cache`` is the folder under ``XIRANG_HOME`` where trained
    tokenizers are kept, one subfolder per key."""

    snapshot: str
    documents: int
    batches: Callable[[], Iterator[list[str]]]
    cache: Path


@dataclass
class WorkerContext:
    """What one worker process knows about itself; handed to strategies and hooks."""

    rank: int
    local_rank: int
    world_size: int
    device: Any
    run_dir: str
    #: the run's validated, read-only config (``config.yaml`` as the worker checked it)
    config: RunConfig
    #: the strategy's ``DeviceMesh`` (dims named ``pp``, ``dp``, ``tp``); None when unsplit
    mesh: Any = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def data_rank(self) -> int:
        """Which share of each global batch this worker reads: ranks that split one model
        replica (tensor or pipeline parallel) read the same batches."""
        return self._mesh_dim("dp", "get_local_rank", self.rank)

    @property
    def data_world(self) -> int:
        """Number of model replicas the global batch is split over."""
        return self._mesh_dim("dp", "size", self.world_size)

    @property
    def loss_replicas(self) -> int:
        """Workers that compute the loss (all but the non-final pipeline stages)."""
        return self.world_size // self._mesh_dim("pp", "size", 1)

    def _mesh_dim(self, dim: str, method: str, default: int) -> int:
        names = getattr(self.mesh, "mesh_dim_names", None) or ()
        return getattr(self.mesh[dim], method)() if dim in names else default


@dataclass(frozen=True)
class StepRunner:
    """The parts of a step a strategy runs itself, in place of the loop's own code (what its
    :meth:`~xirang_core.specs.Strategy.runner` returns); None: the loop runs that part.

    - ``step(batches) -> loss``: a whole step's forwards and backwards (a pipeline);
    - ``evaluate(batches, n) -> float``: the mean held-out loss over ``n`` batches;
    - ``backward(loss)``: backward (Colossal-AI's Booster scales and reduces inside);
    - ``clip(max_norm) -> norm``: clipping, where the strategy's optimizer holds the gradients;
    - ``figures() -> dict``: what the strategy measured of the steps since the last record (a
      pipeline's busy and idle time per stage), merged into it; every rank calls it there.
    """

    step: Callable[[list[Any]], Any] | None = None
    evaluate: Callable[[Any, int], float] | None = None
    backward: Callable[[Any], None] | None = None
    clip: Callable[[float], Any] | None = None
    figures: Callable[[], dict[str, Any]] | None = None


@dataclass(frozen=True)
class DataPins:
    """What a dataset pinned at launch (:meth:`~xirang_core.data.interface.Dataset.prepare`,
    ``pin_tokens``), for the config its workers read: ``data`` the run's ``data`` section naming
    the exact bytes it trains on (None: as configured), ``runtime`` entries for the run's
    ``runtime`` section (token snapshots, counts), ``ids`` the snapshots pinned."""

    data: Mapping[str, Any] | None = None
    runtime: Mapping[str, Any] = field(default_factory=dict)
    ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Runtime:
    """What the launch (or a Slurm task, on its node) learns of the device the run trains on,
    recorded in the run's ``runtime`` section for every worker and the summary."""

    device_type: str
    device_model: str
    devices: int
    collective_backend: str
    peak_flops_per_worker: float
    peak_source: str
    peak_dtype: str
    concurrent_workers: int

    def entries(self) -> dict[str, Any]:
        """The facts as config.yaml's ``runtime`` entries, in their order."""
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


@dataclass(frozen=True)
class SyncWindow:
    """Slot ``slot`` of ``slots`` in every ``period_s`` seconds of wall-clock time: a job given
    it starts its full gradient exchange only inside that slot (a pool scheduler's answer to
    the ``xirang_comm_sync_window`` hook, or the run's ``comm`` settings)."""

    period_s: float
    slot: int = 0
    slots: int = 1

    def __post_init__(self) -> None:
        if self.period_s <= 0 or self.slots < 1 or not 0 <= self.slot < self.slots:
            raise ConfigError(
                f"sync window period={self.period_s}s slot={self.slot} slots={self.slots}: need "
                f"a positive period and 0 <= slot < slots"
            )

    def delay(self, now: float) -> float:
        """Seconds from ``now`` until this job may start its exchange (0 inside its slot)."""
        width = self.period_s / self.slots
        phase = now % self.period_s
        start = self.slot * width
        if start <= phase < start + width:
            return 0.0
        return (start - phase) % self.period_s

    def wait(self) -> float:
        """Sleep until the slot opens; returns the seconds waited."""
        pause = self.delay(time.time())
        if pause > 0:
            time.sleep(pause)
        return pause
