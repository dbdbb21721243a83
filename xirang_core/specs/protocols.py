"""The behaviour plugins implement and the core calls, one Protocol per kind.

Members documented as optional have their defaults in :mod:`xirang_core.specs.defaults`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    import numpy as np
    import torch

    from xirang_core.specs.records import (
        Calibration,
        CostQuote,
        DeviceInfo,
        HealthFinding,
        JobSpec,
        StepRunner,
        TextCorpus,
        Topology,
        WorkerContext,
    )


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
        optional (:class:`DeviceBackendBase`): float32 only."""

    #: optional (:class:`DeviceBackendBase`: False): several workers may share one device (the
    #: host CPU), so ``trainer.nproc`` may exceed the inventory and the peak is not a datasheet's
    shareable: bool
    #: optional (:class:`DeviceBackendBase`: "cpu"): torch's device type and module of this
    #: family (``cuda`` also serves ROCm; Ascend's is ``npu``), which sets the allocator defaults
    torch_type: str

    def caveats(self) -> list[str]:
        """Warnings about this host's setup, logged once per run; optional (none)."""

    def present(self) -> tuple[bool, str]:
        """Whether the hardware is there (usable or not), read without torch: ``xirang
        plugins`` lists it, and ``device=auto`` warns about hardware it cannot use; optional
        (:class:`DeviceBackendBase`: what ``detect`` says)."""


@runtime_checkable
class Strategy(Protocol):
    """Wraps a model for a parallel plan (``parallel=<name>``), in every worker.

    Built with the option's settings as keyword arguments. Every member but ``wrap`` is
    optional, with the default of :class:`StrategyBase`. A strategy that keeps its state its own
    way also defines ``get_state_dict``/``set_state_dict`` (:mod:`xirang_core.checkpoint.state`).
    """

    #: True: the strategy compiles the model's blocks itself (``trainer.compile``), between its
    #: wraps; otherwise the worker compiles the model before ``wrap``
    compiles: bool
    #: True: the workers hold parts of one model through the strategy's own groups (no
    #: ``ctx.mesh``), so evaluating and sampling take every worker together
    splits_model: bool
    #: the optimizer, for a strategy that must make it with the model (Colossal-AI's Booster);
    #: None: the run's ``optim`` builds it after ``wrap``
    optimizer: Any
    #: the module training changes when it is not the model (a stand-in the strategy trains)
    trained: Any

    def wrap(self, model: torch.nn.Module, ctx: WorkerContext) -> torch.nn.Module:
        """The module the loop trains: it runs forward and backward like the model itself."""
        ...

    def build_mesh(self, ctx: WorkerContext) -> Any:
        """The ``DeviceMesh`` stored on ``ctx.mesh`` before ``wrap``; None: no mesh."""
        ...

    def shards_parameters(self, ctx: WorkerContext) -> bool:
        """True: the model is built on the meta device and materialised after ``wrap``."""
        ...

    def runner(self, wrapped: torch.nn.Module) -> StepRunner:
        """What of a step the strategy runs itself for the module ``wrap`` returned (a
        pipeline's whole step, a Booster's backward); the worker asks once, after ``wrap``, and
        hands it to the trainer. Optional (:class:`StrategyBase`: the loop runs everything)."""
        ...


class TrainedModule(Protocol):
    """Deprecated, read for one release: the attributes a strategy written before
    :meth:`Strategy.runner` set on the module ``wrap`` returned, in place of a
    :class:`StepRunner`. :class:`StrategyBase`'s ``runner`` reads them, warning once.

    - ``xirang_step(batches) -> loss``: a whole step's forwards and backwards (a pipeline);
    - ``xirang_eval(batches, n) -> float``: the mean held-out loss over ``n`` batches;
    - ``xirang_backward(loss)``: backward (Colossal-AI's Booster scales and reduces inside);
    - ``xirang_clip(max_norm) -> norm``: clipping, where the strategy's optimizer holds the
      gradients.
    """

    xirang_step: Callable[[list[Any]], Any] | None
    xirang_eval: Callable[[Any, int], float] | None
    xirang_backward: Callable[[Any], None] | None
    xirang_clip: Callable[[float], Any] | None


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

    def report(self, steps: int) -> dict[str, Any] | None:
        """Bytes on the wire and hidden communication over ``steps`` steps, for the summary's
        ``comm``; optional (:class:`CommBackendBase`: None, nothing to report)."""
        ...


@runtime_checkable
class Scheduler(Protocol):
    """Places a job and runs it (``scheduler=<name>``), in the launching process.

    Its optional members default as in :class:`SchedulerBase`.
    """

    #: True: the scheduler only submits the job to run elsewhere (Kubernetes: a manifest to
    #: apply); the run then ends at submission, with no summary to read
    detached: bool
    #: True: the runtime (device, backend, calibration) is resolved on the nodes the workers run
    #: on, not on the submitting host (a login node may have no such device)
    resolves_runtime: bool

    def launch(self, job: JobSpec, entrypoint: Any) -> None:
        """Run ``entrypoint(job.run_dir)`` in ``job.nproc`` workers; return when they finished,
        raise a :class:`~xirang_core.errors.XirangError` naming the failure otherwise."""
        ...


@runtime_checkable
class PoolPolicy(Protocol):
    """A scheduling policy of the pool (``xirang pool serve --policy <name>``, a
    :class:`~xirang_core.specs.PolicySpec`); subclass
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

    #: whether ``param_init`` may run for several parameters at once on threads; optional
    #: (:class:`ModelBase`: yes). A family whose init changes the module while it draws says no.
    param_init_threadsafe: bool
    #: whether ``forward`` takes document indices (``data.document_mask=true``); optional
    #: (:class:`ModelBase`: no)
    document_mask: bool

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
        or created on the meta device and materialised already sharded."""
        ...

    def init_buffers(self) -> None:
        """Fill non-parameter buffers (RoPE tables) after ``to_empty`` materialised a
        meta-device model; optional (:class:`ModelBase`: nothing to fill)."""
        ...

    def after_weights(self) -> None:
        """Called once the starting weights are in (``model.pretrained``'s, or drawn), before
        the strategy wraps the model: what trains in place of them is attached here (LoRA
        adapters over frozen weights); optional (:class:`ModelBase`: nothing)."""
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
class SplitPlan(Protocol):
    """A model family's split plan (a :class:`ModelSpec`'s ``parallelize``): how its layers
    shard for tensor parallel, cut into pipeline stages, and what shape the planner sees, so
    strategies never look inside the module (CONTRIBUTING.md, "The split plan").
    ``compile_head`` is optional (:class:`SplitPlanBase`)."""

    #: the setting that counts layers (``n_layers``): the planner's calibration builds one
    layers_setting: str

    def layers(self, model: torch.nn.Module) -> Mapping[str, torch.nn.Module]:
        """The repeated layers: units of FSDP, recompute and pipeline stages."""
        ...

    def shape(self, settings: dict[str, Any], seq_len: int) -> Any:
        """The ``xirang.model.ModelShape`` the planner's memory and time models read."""
        ...

    def apply_tp(self, model: torch.nn.Module, mesh: Any, sequence_parallel: bool) -> None:
        """Shard the layers' projections over the mesh's ``tp`` dim."""
        ...

    def split_stage(
        self,
        model: torch.nn.Module,
        stage: int,
        stages: int,
        bounds: tuple[int, int] | None = None,
    ) -> Any:
        """Keep pipeline stage ``stage`` of ``stages`` in place; return its layer range.
        ``bounds`` is the range ``[lo, hi)`` of an uneven split (``parallel.stage_layers``,
        :func:`xirang.model.keep_layers`); None: the balanced split."""
        ...

    def tied(self, model: torch.nn.Module) -> torch.nn.Parameter | None:
        """The parameter the first and last stage both hold (a tied embedding), or None."""
        ...

    def compile_head(self, model: torch.nn.Module) -> None:
        """Compile the output head and loss apart from the layers (``trainer.compile``)."""
        ...

    def fsdp_units(self, model: torch.nn.Module) -> list[list[torch.nn.Module]]:
        """The FSDP2 units beside the layers (embeddings; final norm with the head), so they do
        not stay gathered in the root all step; optional (:class:`SplitPlanBase`: none)."""
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

    def save_adapter(self, settings: dict[str, Any], state: dict[str, Any], out: Path) -> int:
        """Write the adapters a run trained over frozen weights (LoRA) as a folder ``peft``
        loads (``PeftModel.from_pretrained(base, out)``); returns how many tensors. Optional
        (:class:`HFInteropBase`: the family trains no adapters, which it says)."""
        ...

    def from_torchtitan(
        self, settings: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], list[str]]:
        """``(xirang tensors, torchtitan names it has no place for)`` from per-parameter
        tensors keyed by torchtitan's names (weights, or an optimizer's moments; 0-d values are
        renamed only) for the model ``settings`` describe (``xirang ckpt import``). Optional."""
        ...

    def to_torchtitan(
        self, settings: dict[str, Any], tensors: dict[str, torch.Tensor], fused: bool
    ) -> dict[str, torch.Tensor]:
        """The inverse of :meth:`from_torchtitan`; ``fused``: as torchtitan's optimizer keys
        fused parameters rather than as its model's ``state_dict`` splits them (``xirang ckpt
        export --format torchtitan``). Optional."""
        ...


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
    :mod:`xirang.tracking` calls it from one background thread, so a slow tracker never
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


@runtime_checkable
class FaultInjector(Protocol):
    """Faults a drill injects into one worker (``xirang drill``'s ``+drill={...}`` section),
    from the hook ``xirang_fault_injector``. The worker's guard calls it at every step's end and
    asks it before each checkpoint save; each fault fires once per run, whatever the restarts."""

    def on_step_end(self, step: int, corrupt_latest: Callable[[], int | None]) -> None:
        """Fire the faults due at ``step`` (kill, slow down, or ``corrupt_latest()``: damage
        the newest checkpoint and return its step)."""
        ...

    def fail_hook(self, step: int) -> Callable[[int], None] | None:
        """For the save at ``step``: a callable (given each new chunk's index) that raises to
        break the save, or None to let it through."""
        ...


class Observer(Protocol):
    """A plugin that watches runs implements some of these hooks (module-level functions
    marked ``@hookimpl``); none is required. Which process calls which:

    - ``xirang_on_run_start(ctx, config)``: every worker, after the model and data are built.
      ``config`` is the run's resolved :class:`~xirang_core.contract.RunConfig`, read-only
      (what ``config.yaml`` holds).
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
        self, ctx: WorkerContext, step: int, metrics: dict[str, float]
    ) -> None: ...
