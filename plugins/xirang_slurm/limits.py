"""Each pool project's Slurm association limit, kept through ``sacctmgr`` as Slurm sites do.

With slurmdbd and ``AccountingStorageEnforce=limits``, slurmctld holds every job, however it
was submitted (by the pool, or by a tenant's own ``sbatch``), to its account's ``GrpTRES``: a
job that would take the account over it pends (reason ``AssocGrpCpuLimit``,
``AssocGrpGRES``...). The pool keeps one Slurm account per project (the project's name in
lower case: Slurm's account names are), holding one user association, the project's
``run_as``, and ``GrpTRES`` at the project's guaranteed plus borrowable cards of each TRES the
pool's device types are counted in (``cpu`` for CPU cards, ``gres/gpu``, ``gres/npu``);
unlimited borrowing is no limit (``-1``).
"""

from __future__ import annotations

from collections.abc import Sequence

from xirang_slurm import commands

#: what sacctmgr says, with exit status 1, when the change was already made
_ALREADY = ("Nothing new added", "Nothing modified", "Nothing deleted")


def slurm_account(project: str) -> str:
    """The Slurm account a pool project's jobs are charged to."""
    return project.lower()


def tres(types: Sequence[str], cards: int | None) -> str:
    """``GrpTRES`` for ``cards`` of each of the pool's device ``types`` (None: no limit)."""
    count = -1 if cards is None else cards
    names = sorted({_tres_of(t) for t in types} or {"cpu"})
    return ",".join(f"{name}={count}" for name in names)


def _tres_of(device_type: str) -> str:
    if device_type == "cpu":
        return "cpu"
    return "gres/npu" if device_type in ("ascend", "npu") else "gres/gpu"


def config() -> dict[str, str]:
    """slurmctld's running configuration (``scontrol show config``), by key."""
    found = {}
    for line in commands.run("scontrol", "show", "config").splitlines():
        key, sep, value = line.partition(" = ")
        if sep:
            found[key.strip()] = value.strip()
    return found


def enforced(conf: dict[str, str]) -> bool:
    """Whether slurmctld holds jobs to their associations' limits."""
    return "limits" in conf.get("AccountingStorageEnforce", "").split(",")


def keep(cluster: str, project: str, user: str, grp_tres: str) -> None:
    """Make ``project``'s account on ``cluster`` hold exactly ``user`` (none: no user) under
    ``grp_tres``: the account made if missing, its other users' associations removed. One
    ``sacctmgr`` question when nothing changed (a pool's start tells it every project)."""
    account = slurm_account(project)
    where = (f"account={account}", f"cluster={cluster}")
    rows = commands.run("sacctmgr", "-n", "-P", "show", "assoc", *where, "format=user,grptres")
    held = dict(line.split("|", 1) for line in rows.splitlines() if "|" in line)
    if not held:  # not even the account's own association (user "")
        _sacctmgr("add", "account", account, f"cluster={cluster}", "organization=xirang")
    if _set(held.get("", "")) != _set(grp_tres):
        _sacctmgr(
            "modify",
            "account",
            "where",
            f"name={account}",
            f"cluster={cluster}",
            "set",
            f"GrpTRES={grp_tres}",
        )
    if user and user not in held:
        _sacctmgr("add", "user", user, *where)
        _default_account(user, account)
    for stale in sorted(held.keys() - {user, ""}):
        _sacctmgr("remove", "user", stale, *where)


def _set(grp_tres: str) -> set[str]:
    """A GrpTRES as the limits it sets (``cpu=-1`` sets none: sacctmgr shows it empty)."""
    return {item for item in grp_tres.split(",") if item and not item.endswith("=-1")}


def _default_account(user: str, account: str) -> None:
    """Give ``user`` ``account`` as its default when it has none (a user new to Slurm gets its
    first; one whose default association was removed has none, and its own ``sbatch`` without
    ``--account`` would be refused)."""
    default = commands.run("sacctmgr", "-n", "-P", "show", "user", user, "format=defaultaccount")
    if not default.strip():
        _sacctmgr("modify", "user", "where", f"name={user}", "set", f"DefaultAccount={account}")


def _sacctmgr(*args: str) -> None:
    """``sacctmgr -i ARGS``; a change already made is no error."""
    try:
        commands.run("sacctmgr", "-i", *args)
    except commands.SlurmError as exc:
        if not any(already in str(exc) for already in _ALREADY):
            raise
