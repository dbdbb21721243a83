"""Stop a run cleanly when it is told to, so a requeued run loses no work.

Whoever stops a run sends SIGTERM: Slurm (``scancel --signal=TERM``), Kubernetes, torch's
elastic agent forwarding its own TERM to the workers, or the pool's local executor when the
job is preempted or a budget stops it; a person at the terminal presses Ctrl-C (SIGINT), which
is the same request. A second Ctrl-C stops a single-process run at once, without the step's
checkpoint (under the elastic agent a worker also gets the agent's copy of the first one, so
there the agent's own shutdown is the hard stop). Inside :func:`stop_on` the signal only
raises a flag; :class:`StopAtStepEnd` checks it after every optimizer step, saves a
checkpoint at that step and raises :class:`RunInterrupted`; the resumed run continues from the
next step. With
several workers they agree (a max all-reduce of the flag, read one step later so the loop never
waits for it) so all stop at the same step and the collective checkpoint is whole, even if the
signal reached them at different moments.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from xirang_core.errors import XirangError

_requested = threading.Event()
_depth = [0]  # nesting of stop_on: the flag is cleared only when the outermost one starts
_received: list[int | None] = [None]  # the signal that asked for the stop
#: what a stop listens to: preemption and Ctrl-C
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunInterrupted(XirangError):
    """The run stopped on request after saving a checkpoint (exit status of a TERM)."""

    exit_code = 143
    label = "xirang"  # a requested stop, not an error
    #: the signal that stopped the run, when one did (SIGINT: Ctrl-C)
    signal: int | None = None


def request_stop() -> None:
    """Ask the run in this process to checkpoint and stop at the end of its current step."""
    _requested.set()


def _on_signal(signum: int, frame: Any) -> None:
    """The first signal asks for a stop at the step's end; a second Ctrl-C of a process that is
    not an elastic worker stops it now (as KeyboardInterrupt, which the launcher reports)."""
    if signum == signal.SIGINT and _requested.is_set() and not _elastic_worker():
        raise KeyboardInterrupt
    if signum == signal.SIGINT and not _requested.is_set() and os.environ.get("RANK", "0") == "0":
        os.write(
            2,
            b"\nCtrl-C: saving a checkpoint at the end of this step, then stopping "
            b"(Ctrl-C again to stop at once)\n",
        )
    _received[0] = _received[0] or signum
    _requested.set()


def _elastic_worker() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


@contextmanager
def stop_on(signals: tuple[int, ...] = STOP_SIGNALS) -> Iterator[None]:
    """While inside, ``signals`` request a stop instead of killing the process.

    Handlers can only be installed from the main thread; elsewhere the flag still works
    through :func:`request_stop`. The previous handlers come back on exit.
    """
    if _depth[0] == 0:
        _requested.clear()
        _received[0] = None
    _depth[0] += 1
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.getsignal(s) for s in signals} if main else {}
    for s in previous:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _depth[0] -= 1


class StopAtStepEnd:
    """The loop's ``on_step_end``: the run guard's work, then stop if a stop was requested."""

    def __init__(self, guard: Any, ctx: Any) -> None:
        self.guard, self.ctx = guard, ctx
        self._group = _vote_group(ctx)
        self._pending: tuple[Any, Any] | None = None

    def __call__(self, step: int) -> None:
        self.guard.on_step_end(step)
        if self._agreed():
            self._checkpoint(step)
            stop = RunInterrupted(
                f"stopped on request at step {step} (checkpoint saved in {self.ctx.run_dir}); "
                f"the resumed run continues from step {step + 1}"
            )
            stop.signal = _received[0]
            raise stop

    def _agreed(self) -> bool:
        """Whether any worker was told to stop. With several workers each step casts a vote on a
        CPU group and reads the previous step's, which arrived long ago: the loop never waits
        for it or synchronises the device, and every worker stops at the same step."""
        if self._group is None:
            return _requested.is_set()
        import torch
        import torch.distributed as dist

        if self._pending is not None:
            work, vote = self._pending
            work.wait()
            if vote.item():
                return True
        vote = torch.tensor([int(_requested.is_set())])
        work = dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._pending = (work, vote)
        return False

    def _checkpoint(self, step: int) -> None:
        """Save ``step`` (unless the interval just did) and wait until it is committed."""
        manager = self.guard.manager
        try:
            if manager.last_saved != step:
                manager.save(step)
            manager.wait(raise_errors=True)
        finally:
            self.guard.heartbeat.stop()


def _vote_group(ctx: Any) -> Any:
    """A gloo group of its own for the stop votes (None for one worker): kept apart from the
    training collectives, which a comm hook may issue from another thread."""
    import torch.distributed as dist

    if getattr(ctx, "world_size", 1) <= 1 or not dist.is_initialized():
        return None
    return dist.new_group(backend="gloo")
