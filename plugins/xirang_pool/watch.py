"""The local executor's ear on the pool: while the workers run here, a thread follows the job
and, once the pool takes its devices away (preempted, requeued off a drained node, cancelled,
stopped by a budget), tells the workers with SIGTERM so they checkpoint and exit. At each
poll it also passes the run's straggler events on to the pool (:mod:`xirang_pool.stragglers`).

The signal goes to this process: with one worker the run is in this process and
:func:`xirang_core.train.interrupt.stop_on` turns it into a stop at the end of the step; with
several, torch's elastic agent (running here) forwards the TERM to its workers. The TERM goes
again whenever a different handler has taken it over since (the agent's replaces the run's
flag while the agent starts its workers), so a stop told before the workers existed is not
lost, and never while TERM would simply kill this process.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from xirang.pool import PoolClient, PoolError
from xirang_pool.stragglers import StragglerRelay

log = logging.getLogger("xirang.pool")


def placement(state: dict[str, Any]) -> tuple[Any, ...]:
    """What changes whenever the pool stops this placement of the job."""
    return (state["state"], state["started"], state["preemptions"], state["requeues"])


class PoolWatch:
    """Follows one job from a thread; :attr:`told` says the workers were told to stop."""

    def __init__(
        self,
        client: PoolClient,
        job_id: int,
        state: dict[str, Any],
        poll_s: float,
        relay: StragglerRelay | None = None,
    ):
        self.client, self.job_id, self.poll_s = client, job_id, poll_s
        self.relay = relay  # the run's stragglers, passed on to the pool at each poll
        self.expected = placement(state)
        self.told = threading.Event()
        self.reason = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pool-watch-{job_id}", daemon=True)

    def __enter__(self) -> PoolWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        signalled: Any = None
        while not self._done.wait(self.poll_s):
            self._pass_on_stragglers()
            if not self.told.is_set() and not self._still_placed():
                self.told.set()
            handler = signal.getsignal(signal.SIGTERM)
            if self.told.is_set() and handler is not signalled and callable(handler):
                os.kill(os.getpid(), signal.SIGTERM)
                signalled = handler

    def _pass_on_stragglers(self) -> None:
        """Best effort: a run directory this poll cannot read (a line being written, a file
        not there yet) waits for the next poll, and never stops the watch, whose duty is to
        tell the workers of a stop."""
        if self.told.is_set() or self.relay is None:
            return
        try:
            self.relay.poll()
        except (ValueError, KeyError, OSError) as exc:
            log.debug("pool: stragglers not read this poll: %s", exc)

    def _still_placed(self) -> bool:
        """False once the pool no longer runs this placement; a service hiccup is not a stop."""
        try:
            state = self.client.job(self.job_id)
        except (PoolError, OSError):
            return True
        if placement(state) == self.expected:
            return True
        self.reason = (
            f"pool job {self.job_id} is {state['state']} "
            f"(preemptions {state['preemptions']}, requeues {state['requeues']})"
        )
        return False
