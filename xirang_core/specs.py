"""Frozen data exchanged between the core and plugins.

Registration hooks return *specs*: small frozen records that name an implementation by import
path instead of holding it. The core can then list every option cheaply (``xirang plugins`` never
imports torch or a vendor library) and import an implementation only when a run selects it. A spec
whose ``requires`` modules are missing stays listed, marked unavailable with the install hint.

The behaviour an implementation provides is described by the Protocols at the end of this module;
plugins implement them, the core calls them.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import torch

__all__ = [
    "SPEC_KINDS",
    "Calibration",
    "CommBackend",
    "CommBackendSpec",
    "Command",
    "CommandSpec",
    "CostPolicy",
    "CostPolicySpec",
    "CostQuote",
    "DatasetSpec",
    "DeviceBackend",
    "DeviceBackendSpec",
    "DeviceInfo",
    "HFInterop",
    "HealthFinding",
    "ImplSpec",
    "InterconnectGroup",
    "JobSpec",
    "LRSchedule",
    "LRScheduleSpec",
    "Model",
    "ModelSpec",
    "Observer",
    "Optimizer",
    "OptimizerSpec",
    "PoolPolicy",
    "Scheduler",
    "SchedulerSpec",
    "StorageTier",
    "StorageTierSpec",
    "Strategy",
    "StrategySpec",
    "TextCorpus",
    "Tokenizer",
    "TokenizerSpec",
    "Topology",
    "Tracker",
    "TrackerSpec",
    "WorkerContext",
    "import_target",
]


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
        import shutil

        return [tool for tool in self.tools if shutil.which(tool) is None]

    def load(self) -> Any:
        """Import and return the implementation (a class or factory)."""
        return import_target(self.target)

    def load_schema(self) -> type | None:
        return import_target(self.schema) if self.schema else None


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

    def load_parallelize(self) -> Any:
        """An instance of the family's split plan."""
        return import_target(self.parallelize)()

    def load_hf(self) -> Any:
        """An instance of the family's Hugging Face mapping, or None if it has none."""
        return import_target(self.hf)() if self.hf else None


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
class DatasetSpec(ImplSpec):
    """A dataset (``data=<name>``); ``target`` is a :class:`~xirang_core.data.interface.Dataset`
    class, the protocol beside the step loader it feeds."""

    kind: ClassVar[str] = "dataset"


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
    DatasetSpec,
)


# --- data describing hardware and runs -------------------------------------------------------


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


# --- behaviour plugins implement ---------------------------------------------------------------


@runtime_checkable
class DeviceBackend(Protocol):
    """What the core needs from a device family."""

    type: str

    def detect(self) -> tuple[bool, str]:
        """Whether devices of this family are usable here, and why not when they are not."""

    def inventory(self) -> list[DeviceInfo]: ...

    def topology(self) -> Topology: ...

    def health(self) -> list[HealthFinding]: ...

    def calibrate(self, refresh: bool = False) -> Calibration:
        """Measured performance, cached per device model; ``refresh`` measures again."""

    def torch_device(self, local_rank: int) -> torch.device: ...

    def collective_backend(self) -> str:
        """The torch.distributed backend name this device family uses by default."""

    def supports_dtype(self, name: str) -> bool:
        """Whether training can compute in the torch dtype ``name`` (``trainer.precision``);
        optional: a backend without it is taken to compute in float32 only."""


@runtime_checkable
class Strategy(Protocol):
    """Wraps a model for a parallel plan (``parallel=<name>``), in every worker.

    Built with the option's settings as keyword arguments. Optional members the worker looks
    for: ``build_mesh(ctx)`` (a ``DeviceMesh`` stored on ``ctx.mesh`` before ``wrap``),
    ``shards_parameters(ctx)`` (True: the model is built on the meta device and materialised
    after ``wrap``), ``optimizer`` (a strategy that must make it), ``compiles``.
    """

    def wrap(self, model: torch.nn.Module, ctx: WorkerContext) -> torch.nn.Module:
        """The module the loop trains: it runs forward and backward like the model itself."""
        ...


@runtime_checkable
class StorageTier(Protocol):
    """A place for shards and checkpoints (``storage=<name>``), by key under a root.

    :class:`xirang_core.storage.tier.FsspecTier` implements all of it over any fsspec
    filesystem; a tier is usually that class with a filesystem and a root chosen."""

    def read(self, key: str) -> bytes: ...

    def write(self, key: str, data: bytes) -> None:
        """Whole or not at all: a reader never sees half an object."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str = "") -> list[str]:
        """Keys under ``prefix``, relative to the root."""
        ...

    def size(self, key: str) -> int: ...

    def evict(self, key: str) -> None:
        """Remove ``key``; absent keys are not an error."""
        ...


@runtime_checkable
class CommBackend(Protocol):
    """A collective backend or gradient-sync option (``comm=<name>``), in every worker."""

    def backend_for(self, device_type: str) -> str:
        """The ``torch.distributed`` backend for ``device_type``; a ConfigError if it cannot
        serve that device family."""
        ...

    def install_hooks(self, model: torch.nn.Module, ctx: WorkerContext) -> None:
        """Register gradient communication hooks on the wrapped model (DDP's comm hook)."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """Places a job and runs it (``scheduler=<name>``), in the launching process.

    A scheduler that only submits the job to run elsewhere (Kubernetes: a manifest to apply)
    sets ``detached = True``: the run then ends at submission, with no summary to read.
    """

    def launch(self, job: JobSpec, entrypoint: Any) -> None:
        """Run ``entrypoint(job.run_dir)`` in ``job.nproc`` workers; return when they finished,
        raise a :class:`~xirang_core.errors.XirangError` naming the failure otherwise."""
        ...


@runtime_checkable
class PoolPolicy(Protocol):
    """A scheduling policy of the pool (``scheduler=pool-<name>``, a
    :class:`xirang_service.pool.policy.PoolPolicySpec`); subclass
    :class:`xirang_service.pool.policy.Policy` and override what differs."""

    name: str

    def rank(self, job: Any, level: int) -> tuple[Any, ...]:
        """Sort key of the queue; smaller is served first."""
        ...


@runtime_checkable
class Model(Protocol):
    """What the worker, planner, sampler and strategies need of a model family's module.

    The class named by a :class:`ModelSpec`'s ``target`` builds it with ``from_config`` from the
    ``model`` config section (``family`` and ``name`` removed, checked against the spec's
    ``schema``). Everything else a strategy needs to *split* the model (its repeated layers,
    tensor-parallel layout, pipeline stages, shape for the planner) lives on the family's
    ``parallelize`` object, so strategies never look inside the module.
    """

    @classmethod
    def from_config(cls, settings: dict[str, Any]) -> Model:
        """A freshly initialised model (on the current default device, which may be ``meta``)."""
        ...

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]`` for token ids ``[batch, seq]``; the mean cross-entropy
        (a scalar) when ``targets`` is given. A pipeline stage (some parts set to ``None`` by
        the family's ``split_stage``) takes and returns hidden states instead."""
        ...

    def param_init(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        """Fill ``tensor`` (the whole, unsharded CPU tensor of parameter ``name``) in place,
        drawing only from ``generator``. Construction initialises through
        :func:`xirang_core.train.init.init_parameters`, which seeds one generator per parameter
        name: weights are then the same whether the model is built whole, split into stages,
        or created on the meta device and materialised already sharded. A family with
        non-parameter buffers (RoPE tables) also defines ``init_buffers()``, called after
        ``to_empty`` materialises a meta-device model."""
        ...

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters counted for FLOPs (PaLM's N: position embeddings excluded)."""
        ...

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token, ``6N + 12·L·h·s``: the MFU numerator."""
        ...

    def generate(
        self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8, top_k: int = 40
    ) -> torch.Tensor:
        """``idx`` with ``new_tokens`` sampled tokens appended (the end-of-run sample)."""
        ...


@runtime_checkable
class HFInterop(Protocol):
    """A model family's mapping to and from the layout Hugging Face ``transformers`` loads.

    Tensors keep their values; names (and, where the layouts differ, the order of rows) change.
    ``xirang ckpt export --format hf`` writes ``to_hf``'s config as ``config.json`` and its
    tensors as safetensors; ``model.pretrained=<dir>`` reads them back with ``from_hf``.
    """

    def to_hf(
        self, settings: dict[str, Any], state: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """``(config.json contents, tensors by Hugging Face name)`` for a full state dict."""
        ...

    def from_hf(
        self, hf_config: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """``(model settings, xirang state dict)`` from a Hugging Face directory's contents."""
        ...


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


@runtime_checkable
class Tokenizer(Protocol):
    """Text to token ids and back: the vocabulary a run trains in.

    The class named by a :class:`TokenizerSpec`'s ``target`` is used in two places. The
    launching process calls ``prepare`` once, after the dataset is pinned: a tokenizer that
    learns from the corpus trains there (and caches what it learned under
    ``TextCorpus.cache``), so workers never train. What ``runtime()`` returns is written into
    the run's ``config.yaml`` (``runtime.tokenizer``) and every worker rebuilds the same
    tokenizer from it with ``load``. Both receive the ``tokenizer`` config section without
    ``name``, checked against the spec's ``schema``.

    Documents and their end: ``encode_batch`` returns each document's ids *followed by the
    tokenizer's end-of-document marker*, so a training window that runs on into the next
    document sees where one ended. The marker is one special token where the tokenizer has one
    (bpe's ``<|endoftext|>``, an hf tokenizer's eos token) and otherwise the ids of a text
    separator (bytes: ``"\\n\\n"``, as the byte corpus always had). ``encode`` (a prompt) adds no
    marker; ``decode`` drops special tokens and ids at or past ``vocab_size`` (a model's
    vocabulary may be padded past the tokenizer's, as GPT-2's 50,257 to 50,304).
    """

    name: str
    #: ids lie in ``[0, vocab_size)``; ``model.vocab_size: 0`` becomes this size
    vocab_size: int
    #: a hash of everything that decides the ids (vocabulary, merges, normaliser, marker): part
    #: of the feature-cache key, so tokens of one tokenizer are never read as another's, and
    #: recorded in the run's config and an export's manifest
    fingerprint: str

    @classmethod
    def max_vocab(cls, settings: dict[str, Any]) -> int:
        """The vocabulary size this option will have at most, known without training: the
        config is checked against it when composed (before the corpus is read), and
        ``model.vocab_size: 0`` takes it; ``prepare`` never returns a larger one."""
        ...

    @classmethod
    def prepare(cls, settings: dict[str, Any], corpus: TextCorpus) -> Tokenizer:
        """The run's tokenizer, in the launching process: trains on ``corpus`` if it must
        (once per corpus and settings; later runs load the cached result)."""
        ...

    @classmethod
    def load(cls, settings: dict[str, Any], runtime: Mapping[str, Any]) -> Tokenizer:
        """The tokenizer ``prepare`` returned, in a worker, from its ``runtime()``; never
        trains (a file that went missing is a :class:`~xirang_core.errors.DataError`)."""
        ...

    def runtime(self) -> dict[str, Any]:
        """Plain data (paths, strings) from which ``load`` rebuilds this tokenizer."""
        ...

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One integer array per document: its ids, then the end-of-document marker."""
        ...

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` alone (a sampling prompt)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; special tokens and ids outside the vocabulary are dropped."""
        ...

    def save(self, folder: Path) -> None:
        """Write Hugging Face tokenizer files into ``folder``: ``tokenizer.json`` and a
        ``tokenizer_config.json``, so ``transformers.AutoTokenizer.from_pretrained(folder)``
        (or ``PreTrainedTokenizerFast(tokenizer_file=...)``) encodes exactly as this one."""
        ...


@runtime_checkable
class Tracker(Protocol):
    """One experiment tracker's side of a run, on the main worker only.

    The class named by a :class:`TrackerSpec`'s ``target`` is built with its option's settings
    (``tracker.<name>`` without ``name``, checked against the spec's ``schema``).
    :mod:`xirang_core.tracking` calls it from one background thread, so a slow tracker never
    holds a training step: ``start`` once per worker process (again after a restart), ``log``
    for each logged step it has not seen before, ``finish`` at the end. An exception from any
    of them disables the tracker for the rest of the run with one warning; training goes on.
    """

    def start(self, run_dir: Path, config: Mapping[str, Any], run_id: str | None) -> str:
        """Open the tracker's run, or continue ``run_id`` (a restarted or resumed run); return
        the id to continue next time (xirang stores it in the run directory)."""
        ...

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """One logged step's figures (numbers only, ``step`` left out)."""
        ...

    def finish(self, summary: Mapping[str, Any] | None, run_dir: Path) -> None:
        """The end of the run: its summary and files (``summary`` None: the run failed)."""
        ...


@runtime_checkable
class CostPolicy(Protocol):
    """Prices device time (``cost=<name>``). The launching process asks for a quote before
    any worker starts (a policy that cannot price the device stops the run there); the run's
    summary quotes its wall time."""

    def quote(self, device_type: str, devices: int, seconds: float) -> CostQuote:
        """The price of ``devices`` devices of ``device_type`` for ``seconds``."""
        ...


@runtime_checkable
class Optimizer(Protocol):
    """Builds the torch optimizer a run steps (``optim.name=<name>``).

    Called in every worker after the strategy wrapped the model, with the parameter groups
    (matrices decayed, vectors not), the ``optim`` section and ``impl``: the kernel choice
    (``fused``/``foreach``) that suits the parameters, to pass on where the class accepts it.
    The learning rate in each group is the schedule's, set before every step."""

    def __call__(
        self, groups: list[dict[str, Any]], optim: Mapping[str, Any], impl: Mapping[str, bool]
    ) -> torch.optim.Optimizer: ...


@runtime_checkable
class LRSchedule(Protocol):
    """The learning rate of each step (``schedule=<name>``), built with the ``schedule``
    group's settings. A pure function of its arguments: a resumed run recomputes the rate of
    any step, so a schedule keeps no state."""

    def lr(self, step: int, max_steps: int, optim: Mapping[str, Any]) -> float:
        """The rate for the 1-based ``step`` of ``max_steps``; ``optim`` holds ``lr``,
        ``min_lr`` and ``warmup_steps``."""
        ...


@runtime_checkable
class Command(Protocol):
    """A ``xirang <name>`` subcommand: ``main(argv) -> exit status``. Keep its module light
    (no torch at import): ``xirang --commands`` lists every command without importing them."""

    def __call__(self, argv: list[str]) -> int: ...


class Observer(Protocol):
    """A plugin that watches runs implements some of these hooks (module-level functions
    marked ``@hookimpl``); none is required. Which process calls which:

    - ``xirang_on_run_start(ctx, config)``: every worker, after the model and data are built.
      ``config`` is the run's resolved config as plain data (what ``config.yaml`` holds).
    - ``xirang_on_step_end(ctx, step, metrics)``: the main worker (rank 0), at logged steps
      only: step 1, every ``trainer.log_every``, evaluation steps and the last. ``metrics``
      holds ``step, loss, bpb, lr, grad_norm, tokens, tokens_per_s, mfu, mem_bytes,
      elapsed_s`` and, when measured, ``val_loss`` and ``compile_s``.
    - ``xirang_on_checkpoint(ctx, step, path)``: the main worker, per committed checkpoint.
    - ``xirang_on_fault(ctx, error)``: every worker that fails, before it exits.
    - ``xirang_on_run_end(ctx, summary)``: the main worker; ``summary`` is ``summary.json``.

    A hook that raises stops the run with one error naming the plugin, the hook and the error
    (its traceback goes to the run's ``plugin-errors.log``). An observer whose failure must not
    stop training marks the hook ``@xirang.optional`` as well: its failure is then a warning.
    """

    def xirang_on_step_end(
        self, ctx: WorkerContext, step: int, metrics: dict[str, Any]
    ) -> None: ...


@dataclass
class WorkerContext:
    """What one worker process knows about itself; handed to strategies and hooks."""

    rank: int
    local_rank: int
    world_size: int
    device: Any
    run_dir: str
    config: Any = None
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


# --- helpers ---------------------------------------------------------------------------------


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
