"""The checkpoint manager of one worker: restore at start, save at the interval, finish.

    manager = CheckpointManager.from_config(config, ctx, model, optimizer, reader, registry)
    start = manager.restore()              # 1, or the step after the latest valid checkpoint
    trainer.fit(start, on_step_end=manager.on_step_end)
    manager.finish(last_step)              # final save, and wait for the background writer

Per step the manager costs one integer comparison (or a clock read for minute intervals) and a
check of the background writer; a save blocks training only while the state is copied to CPU.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from xirang_core.checkpoint.chunks import ChunkedBytes, CorruptCheckpoint, RefusedCheckpoint
from xirang_core.checkpoint.config import CheckpointConfig
from xirang_core.checkpoint.events import record_event
from xirang_core.checkpoint.interval import Interval, IntervalPolicy
from xirang_core.checkpoint.manifest import Manifest, parse_step_dir
from xirang_core.checkpoint.snapshot import (
    Collective,
    SaveFailed,
    SaveResult,
    Snapshot,
    check_loadable,
    dcp_metadata,
    load_tensors,
    rank_file,
    write_snapshot,
)
from xirang_core.checkpoint.state import (
    OPTIM_KEY,
    StagingBuffers,
    StateAdapter,
    TorchStateAdapter,
    adapter_for,
    capture_rng,
    restore_rng,
)
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.checkpoint.tiers import checkpoint_uri, open_tier
from xirang_core.errors import ConfigError
from xirang_core.hookcall import notify

log = logging.getLogger("xirang.checkpoint")
#: how many times the scheduler has restarted this run (set for the workers it launches)
RESTART_ENV = "XIRANG_RESTART"
FailHook = Callable[[int], Callable[[int], None] | None]


class CheckpointManager:
    """Saves and restores one worker's share of the run's state."""

    def __init__(
        self,
        settings: CheckpointConfig,
        store: CheckpointStore,
        ctx: Any,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        reader: Any = None,
        adapter: StateAdapter | None = None,
        config: dict[str, Any] | None = None,
        hook: Any = None,
        fail_hook: FailHook | None = None,
    ) -> None:
        self.settings, self.store, self.ctx = settings, store, ctx
        self.model, self.optimizer, self.reader = model, optimizer, reader
        self.adapter = adapter or adapter_for(None)
        self.config, self.hook, self.fail_hook = config or {}, hook, fail_hook
        self.store.chunks.dedupe = settings.incremental
        distributed = dist.is_available() and dist.is_initialized() and ctx.world_size > 1
        group = dist.new_group(backend="gloo") if distributed else None  # apart from training
        self.peers = Collective(ctx.rank, ctx.world_size, group)
        self.interval = Interval.parse(settings.interval)
        self.policy = IntervalPolicy(self.interval, settings.mtbf_hours, 1)
        self.pending: Future | None = None
        self.staging = StagingBuffers()
        self.last_saved = 0
        self.last_result: SaveResult | None = None
        #: more of each rank's JSON state, by key: objects with state_dict/load_state_dict
        self.stateful: dict[str, Any] = {}
        #: this run's identity, bound into every manifest it signs (rank 0 commits and chooses)
        self.run_id = run_identity(ctx.run_dir) if ctx.is_main else ""

    @classmethod
    def from_config(
        cls,
        config: dict[str, Any],
        ctx: Any,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        reader: Any = None,
        registry: Any = None,
        strategy: Any = None,
        fail_hook: FailHook | None = None,
    ) -> CheckpointManager:
        """The manager a run's ``checkpoint`` section describes."""
        settings = CheckpointConfig(**(config.get("checkpoint") or {}))
        uri = checkpoint_uri(settings.uri, ctx.run_dir)
        tier = open_tier(uri, config.get("storage"), registry)
        store = CheckpointStore(tier, int(settings.chunk_mb * (1 << 20)))
        hook = registry.hook if registry is not None else None
        return cls(
            settings,
            store,
            ctx,
            model,
            optimizer,
            reader,
            adapter_for(strategy),
            config,
            hook,
            fail_hook,
        )

    # --- restore ---------------------------------------------------------------------------

    def restore(self) -> int:
        """Load the checkpoint ``checkpoint.resume`` names; returns the first step to train."""
        resume = self.settings.resume
        if resume == "never":
            return 1
        store, only = (self.store, None) if resume == "auto" else _resume_target(resume)
        chosen = self._choose(store, only) if self.ctx.is_main else None
        step = self.peers.broadcast(chosen[0] if chosen else None)
        if step is None:
            return 1
        files = chosen[1] if chosen else store.read_files(store.manifest(step))
        self._apply(files)
        self.last_saved = step
        self.policy = IntervalPolicy(self.interval, self.settings.mtbf_hours, step + 1)
        if self.ctx.is_main:
            log.info("resumed from checkpoint step %d (%s)", step, store.tier.path(""))
            restarts = int(os.environ.get(RESTART_ENV, 0))
            self._event("restore", step=step, world_size=self.ctx.world_size, restart=restarts)
        return step + 1

    def _same_run(self, manifest: Manifest, step: int) -> None:
        """A step in this run's own folder that another run saved (its manifest signed for
        that run, with the same key) is refused: it was copied in, and resuming would train
        on another run's weights. ``checkpoint.resume=<path>`` loads one on purpose."""
        if self.run_id and manifest.run and manifest.run != self.run_id:
            raise RefusedCheckpoint(
                f"checkpoint.resume: step {step} in {self.store.tier.path('')} was saved by "
                f"another run ({manifest.run}, this run is {self.run_id}): copied in from "
                f"elsewhere; refused (checkpoint.resume=<its run dir> loads another run's "
                f"checkpoint on purpose)"
            )

    def _choose(
        self, store: CheckpointStore, only: int | None
    ) -> tuple[int, dict[str, ChunkedBytes]] | None:
        """Rank 0: the newest checkpoint whose manifest and chunks all check out, read. A
        refused one (unsigned under a key, needing a pickle) stops the run: falling back to an
        older one would quietly throw training away."""
        unusable: list[str] = []  # committed checkpoints that failed their checks
        for cand in store.candidates():
            if only is not None and cand.step != only:
                continue
            problem, refused = cand.problem, cand.refused
            if cand.manifest is not None and store is self.store:
                self._same_run(cand.manifest, cand.step)
            if cand.manifest is not None:
                try:
                    files = store.read_files(cand.manifest)
                    check_loadable(files, f"step {cand.step}")
                    return cand.step, files
                except CorruptCheckpoint as exc:
                    problem, refused = str(exc), isinstance(exc, RefusedCheckpoint)
            if refused:
                raise RefusedCheckpoint(f"checkpoint.resume: {problem}")
            self._skip(cand.step, problem, fatal=only is not None)
            if cand.committed:
                unusable.append(problem)
        if only is not None:
            raise ConfigError(f"checkpoint.resume: no checkpoint for step {only} there")
        if unusable:  # training from step 1 would quietly throw every saved step away
            raise CorruptCheckpoint(
                f"checkpoint.resume=auto: every checkpoint in {store.tier.path('')} is unusable "
                f"({'; '.join(unusable)}); nothing was trained. Set checkpoint.resume=never to "
                f"train this run afresh, or checkpoint.resume=<path> to load another checkpoint"
            )
        return None

    def _skip(self, step: int, problem: str, fatal: bool) -> None:
        if fatal:
            raise CorruptCheckpoint(f"checkpoint.resume names step {step}, unusable: {problem}")
        log.warning("checkpoint step %d is unusable, trying the previous one: %s", step, problem)
        self._event("skip", step=step, reason=problem)

    def _apply(self, files: dict[str, ChunkedBytes]) -> None:
        """Put model, optimizer, RNG and data position back from a checkpoint's files."""
        metadata = dcp_metadata(files)
        if isinstance(self.adapter, TorchStateAdapter):  # empty optimizer state, no warm-up
            self.adapter.prepare_load(self.model, self.optimizer, metadata)
        model_sd, optim_sd = self.adapter.get_state_dict(self.model, self.optimizer)
        template = {"model": model_sd, "optim": optim_sd}
        if not any(key.startswith(f"{OPTIM_KEY}.") for key in metadata.state_dict_metadata):
            log.info("the checkpoint holds weights only: the optimizer starts afresh")
            del template["optim"]  # xirang ckpt import --model-only
        state = load_tensors(files, template, self.peers)
        optim_sd = state.get("optim", optim_sd)
        self.adapter.set_state_dict(self.model, self.optimizer, state["model"], optim_sd)
        own = files.get(rank_file(self.ctx.rank))
        if own is None:  # resumed on more workers than saved: start from rank 0's state
            log.info("no saved state for rank %d; using rank 0's RNG state", self.ctx.rank)
        rank_state = json.loads(bytes(own or files[rank_file(0)]))
        if rank_state["rng"] is not None:  # None in an imported checkpoint: none was saved
            restore_rng(rank_state["rng"], self.ctx.device)
        loader = getattr(self.reader, "load_state_dict", None)
        if own is not None and loader is not None and rank_state.get("data") is not None:
            loader(rank_state["data"])
        for key, part in self.stateful.items():  # every rank: a part may agree with the others
            part.load_state_dict(rank_state.get(key))

    # --- save ------------------------------------------------------------------------------

    def on_step_end(self, step: int) -> None:
        """Called after every optimizer step; saves when the interval is due."""
        if self.pending is not None and self.pending.done():
            self._collect()
        if self.policy.due(step):
            self.save(step)

    def save(self, step: int) -> None:
        """Snapshot now; write in the background (or inline when ``async_save`` is off)."""
        self.wait()
        snapshot = self._snapshot(step)
        extra = {
            "config": self.config,
            "dataset_snapshot": _snapshot_id(self.config),
            "run": self.run_id,
        }
        fail = self.fail_hook(step) if self.fail_hook else None

        def retain() -> None:
            self.store.retain(self.settings.keep, self.settings.keep_every)

        def job() -> SaveResult:
            return write_snapshot(snapshot, self.store, self.peers, extra, retain, fail)

        self.last_saved = step
        self.pending = _start(job) if self.settings.async_save else _done(job)
        cost = snapshot.stall_s if self.settings.async_save else self._wait_cost()
        self.policy.saved(step, cost)

    def _wait_cost(self) -> float:
        started = time.perf_counter()
        self.wait(raise_errors=False)
        return time.perf_counter() - started

    def _snapshot(self, step: int) -> Snapshot:
        """The blocking part: a private CPU copy of everything this rank saves."""
        started = time.perf_counter()
        model_sd, optim_sd = self.adapter.get_state_dict(self.model, self.optimizer)
        tensors = self.staging.copy({"model": model_sd, "optim": optim_sd})
        state_dict = getattr(self.reader, "state_dict", None)
        rank_state = {
            "rng": capture_rng(self.ctx.device),
            "data": state_dict() if state_dict is not None else {"step": step},
            **{key: part.state_dict() for key, part in self.stateful.items()},
        }
        trainer = {
            "step": step,
            "lr": self.optimizer.param_groups[0]["lr"],
            "schedule": self.config.get("optim", {}),
            "max_steps": self.config.get("trainer", {}).get("max_steps"),
        }
        return Snapshot(step, tensors, rank_state, trainer, time.perf_counter() - started)

    def wait(self, raise_errors: bool = False) -> SaveResult | None:
        """Block until the save in flight (if any) is committed or failed."""
        if self.pending is None:
            return self.last_result
        self.pending.exception()  # waits
        return self._collect(raise_errors)

    def _collect(self, raise_errors: bool = False) -> SaveResult | None:
        future, self.pending = self.pending, None
        assert future is not None
        thread = getattr(future, "thread", None)
        if thread is not None:  # a thread that used a process group must end before the group
            thread.join()
        try:
            result = future.result()
        except SaveFailed as exc:
            log.warning("%s; the previous checkpoint stays the latest", exc)
            if self.ctx.is_main:
                self._event("save_failed", reason=str(exc))
            if raise_errors:
                raise
            return None
        self.last_result = result
        if self.ctx.is_main:
            self._event(
                "save",
                step=result.step,
                bytes_total=result.bytes_total,
                bytes_new=result.bytes_new,
                **result.timings,
            )
            if self.hook is not None:
                notify(
                    self.hook,
                    "xirang_on_checkpoint",
                    ctx=self.ctx,
                    step=result.step,
                    path=result.location,
                )
        return result

    def finish(self, step: int) -> SaveResult | None:
        """End of training: the final save (``checkpoint.final``), then wait for the writer."""
        if self.settings.final and self.last_saved != step:
            self.save(step)
        return self.wait(raise_errors=True)

    def _event(self, kind: str, **fields: Any) -> None:
        record_event(self.ctx.run_dir, kind, rank=self.ctx.rank, **fields)


#: the file in a run directory that names the run: kept across its restarts and resumes
RUN_ID_FILE = "run-id"


def run_identity(run_dir: str) -> str:
    """The run's identity: read from its run directory, made there (random) the first time.
    A resumed or restarted run keeps its directory, so it keeps its identity."""
    path = Path(run_dir) / RUN_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(8) + "\n")
        return path.read_text().strip()


def _resume_target(path: str) -> tuple[CheckpointStore, int | None]:
    """``checkpoint.resume=<path>``: a ``step-<N>`` folder, a run directory, or a root."""
    step = parse_step_dir(path)
    if step is not None:
        return CheckpointStore(open_tier(str(Path(path).parent))), step
    root = Path(path) / "checkpoints"
    return CheckpointStore(open_tier(str(root) if root.is_dir() else path)), None


def _start(job: Callable[[], SaveResult]) -> Future:
    """Run ``job`` on a daemon thread: a dying worker must never hang on its writer at exit."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(job())
        except BaseException as exc:
            future.set_exception(exc)

    thread = threading.Thread(target=run, name="xirang-checkpoint", daemon=True)
    thread.start()
    future.thread = thread  # type: ignore[attr-defined]  # joined once the result is taken
    return future


def _done(job: Callable[[], SaveResult]) -> Future:
    future: Future = Future()
    try:
        future.set_result(job())
    except BaseException as exc:
        future.set_exception(exc)
    return future


def _snapshot_id(config: dict[str, Any]) -> str | None:
    """The dataset snapshot a run pinned, when its data section names one."""
    data = config.get("data") or {}
    value = data.get("snapshot") or data.get("snapshot_id")
    return str(value) if value else None
