"""Request and response models of the pool's REST API (xirang_service/pool/rest.py): what each
endpoint takes and answers, in the OpenAPI document the service serves at ``/openapi.json``.

Requests are checked here, at the edge, before the service sees them: every string storable
and bounded (:mod:`xirang_service.web.fields`), every number typed and in range, every payload
field the meter reads (``utilisation``, ``run_ended_at``) a number at submit, not at the tick
that uses it. The messages are the service's own where it had one (cards, priority, usage).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from xirang_service.cost.usage import check_report
from xirang_service.pool.jobs import (
    MAX_CARDS,
    PRIORITIES,
    PriorityName,
    check_cards,
    parse_priority,
)
from xirang_service.pool.quota import MAX_JOBS_CAP, MAX_PAYLOAD_CAP, MAX_RATE
from xirang_service.web.fields import (
    MAX_TEXT,
    STORABLE,
    LongText,
    StrictModel,
    Text,
    check_json,
    via,
)

#: project and node names, as the paths have always matched them
Name = Annotated[str, StringConstraints(max_length=MAX_TEXT, pattern=r"^[\w.-]+$"), STORABLE]
#: a Unix account name ("" clears it)
Account = Annotated[
    str, StringConstraints(max_length=32, pattern=r"^([a-z_][a-z0-9_-]*)?$"), STORABLE
]
#: seconds since the epoch, up to the year 5000: finite, so arithmetic on them stays finite
Epoch = Annotated[float, Field(ge=0, le=1e11)]
Cards = Annotated[int, Field(ge=1, le=MAX_CARDS), BeforeValidator(via(check_cards))]
Priority = Annotated[
    PriorityName | Annotated[int, Field(ge=0, le=max(PRIORITIES.values()))],
    BeforeValidator(via(parse_priority)),
]
Count = Annotated[int, Field(ge=0, le=10_000_000)]
States = Literal["queued", "running", "done", "failed", "cancelled"]


class UsageReport(StrictModel):
    """What an executor measured of a job's run (xirang_service/cost/usage.py)."""

    utilisation: Annotated[float, Field(ge=0, le=1)] | None = None
    run_ended_at: Epoch | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None


Usage = Annotated[UsageReport, BeforeValidator(via(check_report))]


#: what an executor runs for a job without a run directory: argv, one storable string each
Command = Annotated[list[LongText], Field(min_length=1, max_length=1024)]


class Payload(StrictModel):
    """Free-form submitter data kept with the job; the keys the pool itself reads are typed
    (what an executor runs, ``command`` and ``run_dir``, included: a wrong one is a 422 at
    submit, never a scheduling pass that fails), any other is JSON whose strings are storable
    and numbers finite."""

    model_config = ConfigDict(extra="allow")

    utilisation: Annotated[float, Field(ge=0, le=1)] | None = None
    run_ended_at: Epoch | None = None
    tokens: Annotated[int, Field(ge=0)] | None = None
    interruptible: bool = False
    run_dir: LongText | None = None
    command: Command | None = None
    nproc: Annotated[int, Field(ge=1, le=1_000_000)] | None = None

    @model_validator(mode="after")
    def _free_form(self) -> Payload:
        check_json(self.__pydantic_extra__ or {})
        return self


class SubmitIn(StrictModel):
    cards: Cards
    project: Name | None = None
    job_class: Text | None = None
    priority: Priority = "normal"
    name: Text = ""
    payload: Payload | None = None
    allow_mixing: bool = False


class CompleteIn(StrictModel):
    ok: bool = True
    usage: Usage | None = None


#: ranks a straggler report may describe
MAX_RANKS = 65_536
Speed = Annotated[float, Field(gt=0, le=1e9)]


class StragglerIn(StrictModel):
    """A balanced run's straggler, as its executor passes on the run's event
    (xirang_service/pool/stragglers.py)."""

    rank: Annotated[int, Field(ge=0, lt=MAX_RANKS)]
    #: the rank's speed over its expected speed, relative to the fastest rank
    speed_ratio: Annotated[float, Field(gt=0, le=1)]
    #: each rank's micro-batches per second
    speeds: Annotated[list[Speed], Field(min_length=1, max_length=MAX_RANKS)]
    micro_batches: Annotated[int, Field(ge=1, le=10_000_000)]
    remaining_steps: Annotated[int, Field(ge=0, le=10**12)]
    #: seconds a restart costs the run (checkpoint, placement, start-up)
    restart_s: Annotated[float, Field(ge=0, le=1e9)]


class QuotaIn(StrictModel):
    guaranteed: Count | None = None
    borrow_limit: Count | None = None
    team: Name | None = None
    rotate_token: bool = False
    #: the highest priority class the project may submit (where the service governs priority)
    max_priority: PriorityName | None = None
    #: the Unix account the project's jobs run as on a cluster executor (Slurm); "" clears it
    run_as: Account | None = None
    #: run_as may be an account another project holds too (they read each other's files)
    shared_account: bool = False
    #: the umask the project's jobs run with, in octal (default 077: their files are theirs)
    umask: Annotated[str, Field(pattern=r"^0?[0-7]{3}$", max_length=4)] | None = None
    #: the project's jobs queued or running at once (more: 429)
    max_jobs: Annotated[int, Field(ge=1, le=MAX_JOBS_CAP)] | None = None
    #: the JSON bytes of those jobs' payloads together (more: 413)
    max_payload_bytes: Annotated[int, Field(ge=1, le=MAX_PAYLOAD_CAP)] | None = None
    #: requests per second the project may send (0: no limit; more: 429 with Retry-After)
    rate: Annotated[float, Field(ge=0, le=MAX_RATE)] | None = None
    #: requests it may send at once above the rate (0: the rate's one second)
    burst: Annotated[int, Field(ge=0, le=MAX_RATE)] | None = None


class Answer(BaseModel):
    """An answer: its declared fields checked, any further key the service adds passed on
    (the documented schema allows additional properties)."""

    model_config = ConfigDict(extra="allow")


class DrainIn(StrictModel):
    reason: Text = ""


class JobCostOut(Answer):
    """What the pool's metering has charged a job so far (its last tick)."""

    amount: float
    currency: str


class JobOut(Answer):
    id: int
    name: str
    project: str
    cards: int
    job_class: str
    priority: str
    state: States
    submitted: float
    started: float | None
    finished: float | None
    device_type: str
    devices: list[int]
    device_speeds: list[float] = Field(
        default_factory=list,
        description="each device's speed for the job's class, relative to the reference "
        "type, when the placement spans several types (empty otherwise)",
    )
    allow_mixing: bool
    borrowed: bool
    preemptions: int
    requeues: int
    payload: dict[str, Any]
    tokens: int | None = Field(None, description="training tokens, once the executor reported")
    cost: JobCostOut | None = Field(None, description="what metering charged so far (metered)")


class HistoryEventOut(Answer):
    time: float
    event: str = Field(
        description="queued, placed, preempted, requeued, resumed, finished, waiting, ..."
    )
    text: str = Field(description="what happened, where and why, in a sentence")
    detail: dict[str, Any]


class HistoryOut(Answer):
    """A job's history (xirang_service/pool/history.py), oldest event first."""

    id: int
    name: str
    project: str
    state: States
    tokens: int | None
    cost: JobCostOut | None
    events: list[HistoryEventOut]


class QueuedOut(JobOut):
    position: int


class QuotaOut(Answer):
    project: str
    team: str
    guaranteed: int
    borrow_limit: int | None
    run_as: str
    used: int
    borrowed: int


class ProjectOut(QuotaOut):
    """A project as ``/v1/projects`` shows it: its quota, use and caps (the status' project
    table leaves the caps out, to fit a terminal)."""

    max_jobs: int
    max_payload_bytes: int
    rate: float
    burst: int
    umask: str


class QuotaSetOut(ProjectOut):
    token: str = Field("", description="the project's new token: only when created or rotated")


class TypeOut(Answer):
    capacity: int
    free: int


class StatusOut(Answer):
    you: str
    policy: str
    executor: str
    types: dict[str, TypeOut]
    drained: list[str]
    running: int
    queued: int
    fragmentation: float
    budgets_metered: bool
    projects: list[QuotaOut]


class NodeOut(Answer):
    name: str
    type: str
    devices: int
    leaf: str
    spine: str
    domain_size: int
    healthy: int
    drain_reason: str
    used: int


class DeviceOut(Answer):
    id: int
    node: str
    type: str
    idx: int
    used: bool
    job_id: int | None


class ChargeOut(Answer):
    """What the pool's metering charges a job so far (null where the pool does not meter)."""

    amount: float
    currency: str
    policy: str
    device_s: float
    by_type: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="amount and device-seconds per device type (several for a mixed placement)",
    )


class DrainOut(Answer):
    node: str
    requeued: list[int]


class StragglerOut(Answer):
    rank: int
    speed_ratio: float
    node: str
    action: Literal["reported", "drained"]
    why: str
    step_s_now: float
    step_s_replaced: float
    saved_s: float
    requeued: list[int]


class UndrainOut(Answer):
    node: str
    healthy: bool


class UsageOut(Answer):
    project: str
    device_type: str
    bucket_start: float
    device_seconds: float
    card_seconds: float
