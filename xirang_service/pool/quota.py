"""Projects, their guaranteed and borrowable shares, and who uses what right now.

Quotas are in logical cards, so a V100 and a K80 are not worth the same in quota (what users ask
Kueue for in kueue#8902). A project's ``guaranteed`` cards are its nominal quota: never taken away
by others. Above it a project may *borrow* idle capacity up to ``borrow_limit`` (None =
unlimited); borrowed jobs are reclaimable. Projects belong to a ``team``: borrowed capacity is
reclaimed from other teams before it is reclaimed from one's own team (team > project tiers).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import PRIORITIES, Job, allowed_priorities, priority_name

#: the highest priority class a project may use unless the operator allows more
DEFAULT_MAX_PRIORITY = PRIORITIES["normal"]
#: the umask a project's jobs run with unless the operator sets another: what they create is
#: their account's alone (docs/pool.md, Accounts)
DEFAULT_UMASK = 0o077
#: a Unix account name (useradd's default rule), the account a project's jobs run as
ACCOUNT = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
#: a project's jobs queued or running at once, and the bytes of their payloads, unless the
#: operator sets others: one tenant cannot fill the pool's memory, store and scheduling passes
DEFAULT_MAX_JOBS = 2_000
DEFAULT_MAX_PAYLOAD_BYTES = 32 * 1024 * 1024
#: the largest of either the operator may set
MAX_JOBS_CAP, MAX_PAYLOAD_CAP = 1_000_000, 2**40
#: the highest request rate (per second) and burst the operator may set; rate 0: no limit
MAX_RATE = 1_000_000


@dataclass
class Project:
    """A project's share of the pool; ``max_priority`` is the highest priority class its jobs
    may ask for (operator-set, like Kueue's WorkloadPriorityClass with an admission policy);
    ``run_as`` the Unix account its jobs run as on a cluster (Slurm runs a job as its
    submitter), never the pool service's own. ``max_jobs`` and ``max_payload_bytes`` cap its
    queued and running jobs and their payloads' JSON bytes (Slurm's ``MaxSubmitJobs``);
    ``rate`` its requests per second, with bursts of ``burst`` (a token bucket; 0: the rate's
    one second, at least 1), so one tenant's loop cannot take the service's time from the
    others (rate 0: no limit). ``umask`` is the file mode mask its jobs run with (077: what they
    create is their account's alone)."""

    name: str
    guaranteed: int = 0
    borrow_limit: int | None = None
    team: str = "default"
    token_hash: str = ""
    max_priority: int = DEFAULT_MAX_PRIORITY
    run_as: str = ""
    max_jobs: int = DEFAULT_MAX_JOBS
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES
    rate: float = 0.0
    burst: int = 0
    umask: int = DEFAULT_UMASK

    def check(self) -> Project:
        if not self.name or not self.name.replace("-", "").replace("_", "").isalnum():
            raise PoolError(f"project name {self.name!r}: use letters, digits, '-' and '_'")
        if self.guaranteed < 0 or (self.borrow_limit is not None and self.borrow_limit < 0):
            raise PoolError(f"project '{self.name}': quotas must be zero or positive")
        if self.max_priority not in PRIORITIES.values():
            raise PoolError(f"project '{self.name}': max_priority {self.max_priority!r} is unknown")
        for cap, value, most in (
            ("max_jobs", self.max_jobs, MAX_JOBS_CAP),
            ("max_payload_bytes", self.max_payload_bytes, MAX_PAYLOAD_CAP),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise PoolError(f"project '{self.name}': {cap} must be 1..{most}, got {value!r}")
        self._check_rate()
        if (
            isinstance(self.umask, bool)
            or not isinstance(self.umask, int)
            or not 0 <= self.umask <= 0o777
        ):
            raise PoolError(
                f"project '{self.name}': umask must be an octal mode 000..777 (e.g. 077), "
                f"got {self.umask!r}"
            )
        if self.run_as and not ACCOUNT.match(self.run_as):
            raise PoolError(
                f"project '{self.name}': run_as {self.run_as!r} is not a Unix account name "
                "(lower-case letters, digits, '_' and '-', at most 32)"
            )
        return self

    def _check_rate(self) -> None:
        rate, burst = self.rate, self.burst
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= MAX_RATE:
            raise PoolError(
                f"project '{self.name}': rate must be requests per second 0..{MAX_RATE} "
                f"(0: no limit), got {rate!r}"
            )
        if isinstance(burst, bool) or not isinstance(burst, int) or not 0 <= burst <= MAX_RATE:
            raise PoolError(
                f"project '{self.name}': burst must be a whole number of requests 0..{MAX_RATE} "
                f"(0: the rate's one second), got {burst!r}"
            )
        self.rate = float(rate)

    def admit_priority(self, priority: int) -> None:
        """Refuse (403) a priority above the project's highest allowed class, naming those
        it may use."""
        if priority > self.max_priority:
            allowed = ", ".join(allowed_priorities(self.max_priority))
            raise PoolError(
                f"project '{self.name}' may not submit at priority {priority_name(priority)}; "
                f"allowed: {allowed} "
                f"(the operator raises it: xirang pool quota {self.name} --max-priority CLASS)",
                403,
            )


class QuotaBook:
    """Projects and their current usage in cards (guaranteed part and borrowed part)."""

    def __init__(self) -> None:
        self.projects: dict[str, Project] = {}
        self.used: dict[str, int] = defaultdict(int)
        self.borrowed: dict[str, int] = defaultdict(int)

    def project(self, name: str) -> Project:
        try:
            return self.projects[name]
        except KeyError:
            known = ", ".join(sorted(self.projects)) or "none yet"
            raise PoolError(f"unknown project '{name}'; projects: {known}", 404) from None

    def upsert(self, project: Project) -> Project:
        self.projects[project.check().name] = project
        return project

    def within_guarantee(self, job: Job) -> bool:
        """Whether ``job`` fits in the unused guaranteed share of its project."""
        project = self.projects[job.project]
        return self.used[job.project] - self.borrowed[job.project] + job.cards <= project.guaranteed

    def may_borrow(self, job: Job) -> bool:
        """Whether the project's borrowing limit leaves room for ``job`` beyond its guarantee."""
        project = self.projects[job.project]
        if project.borrow_limit is None:
            return True
        over = self.used[job.project] + job.cards - project.guaranteed
        return over <= project.borrow_limit

    def over_limit(self, job: Job) -> str:
        """Why :meth:`may_borrow` refuses ``job``, in the words of a pending reason."""
        project = self.projects[job.project]
        return (
            f"project {job.project} at its borrowing limit: {self.used[job.project]} card(s) "
            f"in use, {project.guaranteed} guaranteed + {project.borrow_limit} borrowed at most"
        )

    def admit(self, job: Job) -> None:
        """Charge a job that starts; it is borrowed unless it fits in the guarantee."""
        job.borrowed = not self.within_guarantee(job)
        self.used[job.project] += job.cards
        if job.borrowed:
            self.borrowed[job.project] += job.cards

    def release(self, job: Job) -> None:
        self.used[job.project] -= job.cards
        if job.borrowed:
            self.borrowed[job.project] -= job.cards

    def total_borrowed(self) -> int:
        return sum(self.borrowed.values())

    def guaranteed_in_use(self, project: str) -> int:
        return self.used[project] - self.borrowed[project]
