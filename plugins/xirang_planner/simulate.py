"""One training step of a pipeline replica, simulated on workers that share cores.

Each stage runs its schedule's actions (forward or backward of one micro-batch) in order; an
action waits for its input from the neighbouring stage (the previous stage's forward, the next
stage's backward) plus the point-to-point message time, then computes, then waits for its own
collectives (tensor parallel). Computing workers share the host's cores as the kernel shares
them (processor sharing): with ``n`` workers computing and ``slots`` cores, each runs at
``min(1, slots / n)`` of its alone speed. Waiting workers use no core, which is why a pipeline's
fill and drain cost less on an oversubscribed host than the ``(p - 1) / m`` bubble of dedicated
devices, and nothing when enough stages stay busy.

``replicas`` identical replicas (data-parallel ranks times tensor-parallel ranks) run in step,
so each computing stage stands for that many computing workers.
"""

from __future__ import annotations

from dataclasses import dataclass

#: an action: ("F" or "B", micro-batch index)
Action = tuple[str, int]


@dataclass(frozen=True)
class StageWork:
    """One micro-batch on one stage: core-seconds alone, then seconds of collective waiting."""

    forward: float
    backward: float
    forward_wait: float = 0.0
    backward_wait: float = 0.0


def schedule_actions(schedule: str, stage: int, stages: int, micro_batches: int) -> list[Action]:
    """The order one stage runs its actions in, as ``torch.distributed.pipelining`` does:
    GPipe all forwards then all backwards; 1F1B ``stages - stage`` forwards, then a backward and
    a forward in turn, then the remaining backwards."""
    forwards = [("F", i) for i in range(micro_batches)]
    backwards = [("B", i) for i in range(micro_batches)]
    if schedule == "gpipe" or stages == 1:
        return forwards + backwards
    warmup = min(micro_batches, stages - stage)
    order = forwards[:warmup]
    for i in range(micro_batches - warmup):
        order += [backwards[i], forwards[warmup + i]]
    return order + backwards[micro_batches - warmup :]


def simulate_step(
    work: list[StageWork],
    schedule: str,
    micro_batches: int,
    hop_s: float,
    slots: float,
    replicas: int,
) -> float:
    """Seconds from the first action to the last one's end, over all stages."""
    stages = len(work)
    orders = [schedule_actions(schedule, s, stages, micro_batches) for s in range(stages)]
    sim = _Simulation(work, orders, hop_s, slots, replicas)
    return sim.run()


class _Simulation:
    """Event-driven processor sharing; state per stage: next action, phase, what is left."""

    def __init__(
        self,
        work: list[StageWork],
        orders: list[list[Action]],
        hop_s: float,
        slots: float,
        replicas: int,
    ) -> None:
        self.work, self.orders, self.hop_s = work, orders, hop_s
        self.slots, self.replicas = slots, replicas
        self.next = [0] * len(work)
        self.phase: list[str] = ["idle"] * len(work)  # idle | compute | wait
        self.left = [0.0] * len(work)  # core-seconds to compute, or the wait's end time
        self.done: dict[tuple[int, str, int], float] = {}
        self.now = 0.0

    def run(self) -> float:
        while True:
            self._start_ready()
            if all(n == len(o) for n, o in zip(self.next, self.orders, strict=True)) and all(
                p == "idle" for p in self.phase
            ):
                return self.now
            self._advance()

    def _ready_at(self, stage: int) -> float | None:
        """When the stage's next action has its input, or None while that is not known."""
        kind, mb = self.orders[stage][self.next[stage]]
        source = stage - 1 if kind == "F" else stage + 1
        if source < 0 or source >= len(self.work):
            return self.now
        finished = self.done.get((source, kind, mb))
        return None if finished is None else finished + self.hop_s

    def _start_ready(self) -> None:
        for s in range(len(self.work)):
            if self.phase[s] != "idle" or self.next[s] == len(self.orders[s]):
                continue
            ready = self._ready_at(s)
            if ready is not None and ready <= self.now + 1e-15:
                kind, _ = self.orders[s][self.next[s]]
                w = self.work[s]
                self.phase[s] = "compute"
                self.left[s] = w.forward if kind == "F" else w.backward

    def _rate(self) -> float:
        computing = sum(p == "compute" for p in self.phase) * self.replicas
        return min(1.0, self.slots / computing) if computing else 1.0

    def _advance(self) -> None:
        """Move time to the next event: a computation or wait ending, or an input arriving."""
        rate = self._rate()
        events = []
        for s, phase in enumerate(self.phase):
            if phase == "compute":
                events.append(self.now + self.left[s] / rate)
            elif phase == "wait":
                events.append(self.left[s])
            elif self.next[s] < len(self.orders[s]):
                ready = self._ready_at(s)
                if ready is not None:
                    events.append(ready)
        step_to = min(events)
        for s, phase in enumerate(self.phase):
            if phase == "compute":
                self.left[s] -= (step_to - self.now) * rate
        self.now = step_to
        for s, phase in enumerate(self.phase):
            if phase == "compute" and self.left[s] <= 1e-12:
                kind, _ = self.orders[s][self.next[s]]
                wait = self.work[s].forward_wait if kind == "F" else self.work[s].backward_wait
                self.phase[s], self.left[s] = "wait", self.now + wait
            if self.phase[s] == "wait" and self.left[s] <= self.now + 1e-15:
                kind, mb = self.orders[s][self.next[s]]
                self.done[(s, kind, mb)] = self.now
                self.next[s] += 1
                self.phase[s] = "idle"
