"""Which Unix accounts a project's jobs may run as (``run_as``), and with what file mode.

A project's jobs run as its account (the Slurm executor submits them with ``runuser``), so the
account is the wall between tenants: it must be a login account of this host (``UID_MIN`` ..
``UID_MAX`` of ``/etc/login.defs``, as ``useradd`` gives), never a system account (``postgres``,
``munge``, ``daemon``: their files and daemons would be the tenant's), never the pool service's
own user (its store and tokens), and never another project's unless the operator shares it on
purpose (``--shared-account``): two projects on one account read each other's work.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

from xirang_service.pool.errors import PoolError
from xirang_service.pool.quota import Project

LOGIN_DEFS = Path("/etc/login.defs")
#: login.defs' defaults (shadow-utils) when the file or the key is missing
DEFAULT_UID_RANGE = (1000, 60000)


def uid_range(login_defs: Path = LOGIN_DEFS) -> tuple[int, int]:
    """``UID_MIN`` and ``UID_MAX`` of ``login_defs`` (1000 and 60000 where it says nothing):
    the uids ``useradd`` gives people, outside which accounts belong to the system."""
    found = dict(zip(("UID_MIN", "UID_MAX"), DEFAULT_UID_RANGE, strict=True))
    with contextlib.suppress(OSError):
        for line in login_defs.read_text().splitlines():
            key, _, value = line.partition("#")[0].strip().partition(" ")
            if key in found and value.strip().isdigit():
                found[key] = int(value.strip())
    return found["UID_MIN"], found["UID_MAX"]


def check_account(project: Project, others: Iterable[Project] = (), shared: bool = False) -> None:
    """Refuse ``project``'s ``run_as`` unless it is a login account of this host that is not
    the service's own and, unless ``shared``, that none of ``others`` (the other projects)
    holds; each refusal names what is wrong and what would do. An empty ``run_as`` (none:
    cleared) passes."""
    account = project.run_as
    if not account:
        return
    where = f"project '{project.name}': run_as '{account}'"
    try:
        uid = pwd.getpwnam(account).pw_uid
    except KeyError:
        raise PoolError(
            f"{where} is no user on this host; create the account (useradd) or name another"
        ) from None
    if uid == os.geteuid():
        raise PoolError(
            f"{where} is the pool service's own user; its jobs could read the pool's store and "
            "tokens: name an account of its own"
        )
    low, high = uid_range()
    if not low <= uid <= high:
        raise PoolError(
            f"{where} has uid {uid}, a system account (login accounts have uids {low}..{high}, "
            f"UID_MIN..UID_MAX in {LOGIN_DEFS}); create one for the project: "
            "useradd --create-home NAME"
        )
    holders = sorted(p.name for p in others if p.run_as == account and p.name != project.name)
    if holders and not shared:
        raise PoolError(
            f"{where} is already project '{holders[0]}''s account: two projects on one account "
            "read each other's files; name an account of its own, or share it on purpose "
            "(xirang pool quota ... --shared-account; shared_account: true)",
            409,
        )


#: one start at a time changes the process's umask (it is the process's, not a thread's)
_UMASK_LOCK = threading.Lock()


@contextlib.contextmanager
def job_umask(mask: int) -> Iterator[None]:
    """The process's umask set to ``mask`` while an executor starts a job, whose processes
    (``runuser``, ``sbatch``, and Slurm's job after it) inherit it; the service's own files
    are created with explicit modes, so they do not depend on it."""
    with _UMASK_LOCK:
        old = os.umask(mask)
        try:
            yield
        finally:
            os.umask(old)
