"""``trainer.profile.steps=[start,end]``: torch.profiler over those training steps.

Each worker records CPU and, where present, accelerator activity (and tensor memory, unless
``trainer.profile.memory=false``) from the start of step ``start`` to the end of step ``end``,
then writes a Chrome trace through ``tensorboard_trace_handler`` into ``<run dir>/profile/``:
``rank<r>.<time>.pt.trace.json``, which Perfetto (ui.perfetto.dev), chrome://tracing and
TensorBoard's profiler (``tensorboard --logdir <run dir>``, with torch-tb-profiler) open. The top
operators by time go to ``top_operators_rank<r>.txt``; the run prints the main worker's table
at its end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

PROFILE_DIR = "profile"
#: the accelerator's profiler activity, by torch device type (ROCm's devices are "cuda")
ACCELERATOR_ACTIVITY = {"cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA"}


class StepProfiler:
    """Brackets each training step (the loop's ``profiler``); records the steps in range."""

    def __init__(self, settings: dict[str, Any], rank: int, device: Any, run_dir: str) -> None:
        self.first, self.last = settings["steps"]
        self.top, self.memory = settings["top"], settings["memory"]
        self.rank, self.device = rank, torch.device(device)
        self.folder = Path(run_dir) / PROFILE_DIR
        self.profiler: Any = None

    @contextlib.contextmanager
    def __call__(self, step: int) -> Iterator[None]:
        if self.profiler is None and self.first <= step <= self.last:
            self._start(step)
        yield
        if self.profiler is not None:
            self.profiler.step()
            if step >= self.last:
                self._stop()

    def _start(self, step: int) -> None:
        from torch.profiler import profile, tensorboard_trace_handler

        self.folder.mkdir(exist_ok=True)
        self.profiler = profile(
            activities=activities(self.device),
            schedule=self._action,  # a schedule makes the trace mark each ProfilerStep#<n>
            profile_memory=self.memory,
            record_shapes=self.memory,  # the memory view attributes allocations by shape
            on_trace_ready=tensorboard_trace_handler(str(self.folder), f"rank{self.rank}"),
        )
        # count from the training step, so the trace's ProfilerStep#<n> are the run's steps
        self.profiler.step_num, self.profiler.current_action = step, self._action(step)
        self.profiler.start()

    def _action(self, step: int) -> Any:
        """Record the window's steps, and write the trace when its last one ends."""
        from torch.profiler import ProfilerAction

        if step == self.last:
            return ProfilerAction.RECORD_AND_SAVE
        return ProfilerAction.RECORD if self.first <= step < self.last else ProfilerAction.NONE

    def _stop(self) -> None:
        profiler, self.profiler = self.profiler, None
        profiler.stop()  # the step after the last one wrote the trace; this ends the session
        on_device = len(activities(self.device)) > 1
        sort_by = "self_device_time_total" if on_device else "self_cpu_time_total"
        table = profiler.key_averages().table(sort_by=sort_by, row_limit=self.top)
        (self.folder / f"top_operators_rank{self.rank}.txt").write_text(table + "\n")


def activities(device: torch.device) -> list[Any]:
    """CPU, and the device's own activity where this torch can record it."""
    from torch.profiler import ProfilerActivity, supported_activities

    found = [ProfilerActivity.CPU]
    name = ACCELERATOR_ACTIVITY.get(device.type)
    if name is None and device.type == torch._C._get_privateuse1_backend_name():
        name = "PrivateUse1"  # an out-of-tree device (Ascend's npu) profiles through this
    accelerator = getattr(ProfilerActivity, name, None) if name else None
    if accelerator is not None and accelerator in supported_activities():
        found.append(accelerator)
    return found


def for_run(config: dict[str, Any], rank: int, device: Any, run_dir: str) -> Any:
    """The loop's step bracket: a profiler when ``trainer.profile.steps`` is set."""
    settings = config["trainer"]["profile"]
    if not settings["steps"]:
        return contextlib.nullcontext
    return StepProfiler(settings, rank, device, run_dir)


def print_top_operators(run_dir: Path) -> None:
    """At the end of a profiled run: the main worker's top operators and where the trace is."""
    table = run_dir / PROFILE_DIR / "top_operators_rank0.txt"
    if not table.exists():
        return
    traces = sorted((run_dir / PROFILE_DIR).glob("rank0.*.pt.trace.json"))
    print(f"top operators by time (trainer.profile), trace: {traces[-1] if traces else '?'}")
    print(table.read_text().rstrip())
