"""Jobs as the pool sees them: a gang of logical cards of one job class, for one project."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, get_args

from xirang_service.pool.cards import DEFAULT_CLASS
from xirang_service.pool.errors import PoolError

#: the priority classes, lowest first
PriorityName = Literal["low", "normal", "high", "critical"]
#: each class's rank (its place in :data:`PriorityName`); a higher one is served (and
#: protected) first
PRIORITIES: dict[str, int] = {name: rank for rank, name in enumerate(get_args(PriorityName))}
#: the most cards one job may ask for: anything larger is a typo, not a workload
MAX_CARDS = 100_000


class JobState(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


#: joins the device types of a mixed placement in ``Job.device_type`` ("v100+p100")
MIX = "+"


@dataclass
class Job:
    """One gang job. ``attained`` is card-seconds of service so far (Tiresias' attained service).

    ``work`` is the job's size in reference card-seconds, known only to the simulator; the
    service never predicts durations. ``borrowed`` is set at admission: the job runs on capacity
    beyond its project's guaranteed share and may be reclaimed.
    """

    id: int
    project: str
    cards: int
    job_class: str = DEFAULT_CLASS
    priority: int = PRIORITIES["normal"]
    name: str = ""
    allow_mixing: bool = False
    submitted: float = 0.0
    state: JobState = JobState.QUEUED
    started: float | None = None
    finished: float | None = None
    attained: float = 0.0
    devices: tuple[int, ...] = ()
    device_type: str = ""
    borrowed: bool = False
    preemptions: int = 0
    requeues: int = 0
    work: float = 0.0
    payload: dict[str, Any] = field(default_factory=dict)

    @property
    def held_types(self) -> tuple[str, ...]:
        """The device types the job runs on: one, or several for a mixed placement."""
        return tuple(self.device_type.split(MIX)) if self.device_type else ()

    def attained_at(self, now: float) -> float:
        """Attained service including the current run, in card-seconds."""
        if self.state is JobState.RUNNING and self.started is not None:
            return self.attained + self.cards * max(0.0, now - self.started)
        return self.attained


def parse_priority(value: Any) -> int:
    """A priority name (low/normal/high/critical) or an integer 0..3, else a clear error."""
    if isinstance(value, str) and value in PRIORITIES:
        return PRIORITIES[value]
    if isinstance(value, int) and not isinstance(value, bool) and value in PRIORITIES.values():
        return value
    raise PoolError(f"priority {value!r} is not valid; use one of {', '.join(PRIORITIES)}")


def check_cards(value: Any) -> int:
    """A card count between 1 and MAX_CARDS, else a clear error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PoolError(f"cards must be a whole number, got {value!r}")
    if not 1 <= value <= MAX_CARDS:
        raise PoolError(f"cards must be between 1 and {MAX_CARDS}, got {value}")
    return value


def allowed_priorities(highest: int) -> list[str]:
    """The classes a project whose highest allowed class is ``highest`` may submit at."""
    return [name for name, value in PRIORITIES.items() if value <= highest]


def check_payload(payload: Any) -> dict[str, Any]:
    """A job's payload: a JSON object whose fields the pool itself reads have their types (the
    executor's usage report that metering reads, ``interruptible`` that placement reads), so a
    wrong one is refused at submit, not found by the tick that uses it."""
    from xirang_service.cost.preferences import INTERRUPTIBLE
    from xirang_service.cost.usage import KEYS, UsageError, check_report

    if not isinstance(payload, dict):
        raise PoolError(f"payload must be a JSON object, got {payload!r}")
    try:
        check_report({key: payload[key] for key in KEYS if key in payload})
    except UsageError as exc:
        raise PoolError(f"payload: {exc}") from None
    if not isinstance(payload.get(INTERRUPTIBLE, False), bool):
        raise PoolError(f"payload: {INTERRUPTIBLE} must be true or false")
    command = payload.get("command")
    if command is not None and not _argv(command):
        raise PoolError(f"payload: command must be a non-empty list of strings, got {command!r}")
    return payload


def _argv(command: Any) -> bool:
    """Whether ``command`` is what an executor can run: a non-empty list of strings."""
    return isinstance(command, list) and bool(command) and all(isinstance(a, str) for a in command)


def priority_name(value: int) -> str:
    return next((k for k, v in PRIORITIES.items() if v == value), str(value))
