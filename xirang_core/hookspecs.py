"""Every hook a xirang plugin can implement, grouped by phase.

Registration hooks return lists of frozen specs (see :mod:`xirang_core.specs`) that name an
implementation by import path; the core imports it only when a run selects it. Implementations may
accept a subset of a hook's arguments, so hooks can grow arguments without breaking plugins.
Always call hooks with keyword arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from xirang_core.specs import (
    CommandSpec,
    CommBackendSpec,
    CostPolicySpec,
    DatasetSpec,
    DeviceBackendSpec,
    FaultInjector,
    LRScheduleSpec,
    ModelSpec,
    OptimizerSpec,
    PlannerSpec,
    PolicySpec,
    SchedulerSpec,
    StorageTierSpec,
    StrategySpec,
    TokenizerSpec,
    TrackerSpec,
    WorkerContext,
)
from xirang_core.specs.records import JsonValue, SyncWindow

if TYPE_CHECKING:  # annotations only: the hook specs import neither torch nor the config
    from xirang_core.contract import RunConfig
    from xirang_core.parallel.plan import ModelShape, ParallelPlan

PROJECT = "xirang"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# --- registration: what a plugin offers -------------------------------------------------------


@hookspec
def xirang_device_backends() -> list[DeviceBackendSpec]:
    """Device families this plugin drives (``device=<name>``).

    The target class implements :class:`xirang_core.specs.DeviceBackend`: detection that never
    raises when hardware is absent, inventory, topology, health probes, calibration, the torch
    device string and the default collective backend.
    """


@hookspec
def xirang_parallel_strategies() -> list[StrategySpec]:
    """Parallel strategies (``parallel=<name>``), each a :class:`~xirang_core.specs.Strategy`."""


@hookspec
def xirang_storage_tiers() -> list[StorageTierSpec]:
    """Storage tiers (``storage=<name>``): fsspec-backed places to read and write shards and
    checkpoints."""


@hookspec
def xirang_comm_backends() -> list[CommBackendSpec]:
    """Collective backends and gradient-sync options (``comm=<name>``)."""


@hookspec(firstresult=True)
def xirang_comm_sync_window(ctx: WorkerContext, config: RunConfig) -> SyncWindow | None:
    """The sync window of this worker's job, or None: a pool scheduler assigns slots so that
    large jobs sharing links do not run their full gradient exchange at the same moment.

    The first answer wins over the window the run's ``comm`` config sets."""


@hookspec
def xirang_schedulers() -> list[SchedulerSpec]:
    """Schedulers (``scheduler=<name>``): place a job and run it through an executor."""


@hookspec
def xirang_cost_policies() -> list[CostPolicySpec]:
    """Cost policies (``cost=<name>``): price device time, enforce budgets."""


@hookspec
def xirang_models() -> list[ModelSpec]:
    """Model families (the ``family`` key of a ``model=`` option) and how they may be split."""


@hookspec
def xirang_tokenizers() -> list[TokenizerSpec]:
    """Tokenizers (``tokenizer=<name>``), each a :class:`~xirang_core.specs.Tokenizer` class:
    how a snapshot's text becomes the token ids a run trains on, and how ids read back."""


@hookspec
def xirang_datasets() -> list[DatasetSpec]:
    """Datasets (``data=<name>``), each a :class:`~xirang_core.data.interface.Dataset` class:
    what the launch pins once, and the token batches every rank trains and validates on."""


@hookspec
def xirang_optimizers() -> list[OptimizerSpec]:
    """Optimizers (``optim.name=<name>``), each an :class:`~xirang_core.specs.Optimizer`
    factory: parameter groups and the ``optim`` section in, a ``torch.optim.Optimizer`` out."""


@hookspec
def xirang_lr_schedules() -> list[LRScheduleSpec]:
    """Learning-rate schedules (``schedule=<name>``), each an
    :class:`~xirang_core.specs.LRSchedule` class: the rate of every step, warm-up included."""


@hookspec
def xirang_trackers() -> list[TrackerSpec]:
    """Experiment trackers (``tracker=[<name>,...]``, several at once), each a
    :class:`~xirang_core.specs.Tracker` class. The plugin also implements the run-event hooks
    below and hands them to :mod:`xirang.tracking`, which runs the tracker on the main
    worker, off the training thread, and keeps a failing one from stopping the run."""


@hookspec
def xirang_commands() -> list[CommandSpec]:
    """Subcommands of the ``xirang`` command line (``xirang <name> ...``)."""


@hookspec
def xirang_planners() -> list[PlannerSpec]:
    """Planners ``parallel=auto`` can ask for a plan (``parallel.planner=<name>``)."""


@hookspec(firstresult=True)
def xirang_measure_plans(
    config: RunConfig, plans: list[ParallelPlan], steps: int
) -> list[float] | None:
    """Seconds per step of each of ``plans`` (a list of
    :class:`~xirang_core.parallel.plan.ParallelPlan`), trained ``steps`` steps on the run's
    own workers and device type; None when this plugin does not measure. ``parallel=auto
    parallel.smoke=true`` takes the fastest of the planner's top plans by these figures, whichever
    planner ranked them. The built-in planner plugin answers with real worker processes
    (:func:`xirang.planning.run_plans`)."""


@hookspec(firstresult=True)
def xirang_stage_capacity(
    shape: ModelShape, plan: ParallelPlan, stage: int, memory_bytes: int
) -> int | None:
    """The most layers pipeline stage ``stage`` of ``plan`` holds in ``memory_bytes`` of its
    device's memory, by this plugin's memory model (``shape`` a
    :class:`~xirang_core.parallel.plan.ModelShape`); None when this plugin has none.
    ``parallel.stage_layers=auto`` keeps each stage within it; the built-in planner plugin
    answers with its memory model."""


@hookspec
def xirang_pool_policies() -> list[PolicySpec]:
    """Scheduling policies of the pool service (``xirang pool serve --policy <name>``): the
    queue's order, the device types a job may take, what it may preempt."""


@hookspec
def xirang_config_search_paths() -> list[str]:
    """Folders of Hydra config groups this plugin adds, as ``pkg://package.conf`` or
    ``file:///abs/path``; each holds group folders (``device/``, ``parallel/`` ...) whose option
    files carry ``name:``, the registry key the option selects."""


@hookspec
def xirang_hydra_plugins() -> list[str]:
    """Hydra plugin classes this plugin adds (a sweeper, a launcher), as ``module:Class``; the
    core registers each with Hydra before it composes. Hydra instantiates plugins only from its
    ``hydra_plugins`` namespace, so each class sets ``__module__ = "hydra_plugins.<name>"`` and
    its config's ``_target_`` names it there. The module should import little: it loads at the
    start of every run."""


# --- run events: observers --------------------------------------------------------------------
# Called through :func:`xirang_core.hookcall.notify`: a failure names the plugin and the hook;
# :class:`xirang_core.specs.Observer` says which worker calls which and what the arguments hold.


@hookspec
def xirang_on_run_start(ctx: WorkerContext, config: RunConfig) -> None:
    """A worker is about to train; ``ctx`` is its :class:`~xirang_core.specs.WorkerContext`."""


@hookspec
def xirang_on_step_end(ctx: WorkerContext, step: int, metrics: dict[str, float]) -> None:
    """A logged optimizer step finished on the main worker; ``metrics`` are that step's figures.

    Called only at logging steps so observers never force a device synchronisation."""


@hookspec
def xirang_should_prune(ctx: WorkerContext, step: int, metrics: dict[str, float]) -> bool | None:
    """An evaluation step of a sweep trial finished on the main worker (``metrics`` holds its
    ``val_loss``): a sweeper plugin reports the trial's objective to its pruner and answers
    True to end the run cleanly at this step (its summary says ``pruned_at``), None otherwise.

    Called only in a trial (``sweep.trial`` set) and only at evaluation steps."""


@hookspec(firstresult=True)
def xirang_fault_injector(config: RunConfig, run_dir: str, rank: int) -> FaultInjector | None:
    """The faults a drill injects into this worker, when the run's config has a ``drill``
    section (``xirang drill``, ``+drill={kill:[[3,1]]}``): a
    :class:`~xirang_core.specs.FaultInjector`, or None. The built-in checkpoint tools
    (``xirang_ckpt``) answer it."""


@hookspec
def xirang_on_checkpoint(ctx: WorkerContext, step: int, path: str) -> None:
    """A checkpoint for ``step`` was committed at ``path``."""


@hookspec
def xirang_on_fault(ctx: WorkerContext, error: BaseException) -> None:
    """A worker is failing with ``error``; observers record it before the process exits."""


@hookspec
def xirang_on_run_end(ctx: WorkerContext, summary: dict[str, JsonValue]) -> None:
    """Training finished on the main worker; ``summary`` is what ``summary.json`` holds."""
