"""``xirang pool``: run the pool service, use it, and simulate policies on traces.

    xirang pool serve --cluster cluster.yaml [--store pool.db | postgresql://..]
                      [--host H --port P --advertise URL]
                      [--policy ..] [--prices book.yaml] [--cost-db cost.db]
    xirang pool status | queue | jobs [--state running] [--json]
    xirang pool history JOB
    xirang pool cancel JOB
    xirang pool quota [PROJECT --guaranteed N --borrow-limit N --team T
                               --max-priority CLASS --umask OCTAL
                               --run-as USER [--shared-account] --max-jobs N
                               --max-payload-bytes BYTES --rate PER_S --burst N]
    xirang pool drain NODE [--reason TEXT] | undrain NODE
    xirang pool simulate --trace philly.csv --cluster cluster.yaml
                         --policy fifo,priority,hetero [--mixing off,balanced]
                         [--load 0.5,1,1.5,2 --plot jct_load.png]

Clients read XIRANG_POOL_URL (replicas: their URLs, comma-separated) and XIRANG_POOL_TOKEN
(a project's token, or the operator's); without it, the operator's token, as below.
Operator commands send --token, else XIRANG_POOL_OPERATOR_TOKEN, else XIRANG_POOL_TOKEN, else
the token pool serve kept beside its default state, if it serves at that URL.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import socket
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xirang_core.paths import private_file, xirang_home
from xirang_core.plugins import get_registry
from xirang_core.specs import SchedulerSpec, import_target
from xirang_core.terminal import help_text
from xirang_service.pool.client import PoolClient
from xirang_service.pool.database import (
    LOCK_SUFFIX,
    TOKEN_SUFFIX,
    URL_SUFFIX,
    beside_state,
    redact,
)
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import PRIORITIES
from xirang_service.pool.tokens import new_token

if TYPE_CHECKING:
    from xirang_service.cost.governor import PoolBudgets

OPERATOR_TOKEN_ENV = "XIRANG_POOL_OPERATOR_TOKEN"
#: beside the state: the generated operator token, and the URL its service last served at
#: ``--executor`` for jobs their submitters run (no cluster behind the pool)
LOCAL_EXECUTOR = "local"


def default_state() -> str:
    """Where ``xirang pool serve`` keeps its state unless told (``--store``), so that the
    operator's commands and ``xirang console`` find it without being told either."""
    return str(xirang_home() / "pool.db")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    return args.run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xirang pool",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _client_options(parser, after_command=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # the same options after the command too (`xirang pool jobs --json`), as its footer says
    common = argparse.ArgumentParser(add_help=False)
    _client_options(common, after_command=True)
    add = partial(sub.add_parser, parents=[common])

    serve = add("serve", help="run the pool service")
    serve.add_argument("--cluster", help="cluster file (needed the first time)")
    serve.add_argument(
        "--store",
        "--state",
        dest="state",
        default=default_state(),
        help="state store: an SQLite file, or a postgresql://user@host/db URL (shared)",
    )
    serve.add_argument("--policy", default="priority", help="scheduling policy plugin")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8476)
    serve.add_argument(
        "--advertise",
        default="",
        metavar="URL",
        help="the URL clients reach this replica at, which standbys name while it leads "
        "(default http://HOST:PORT; docs/pool.md, High availability)",
    )
    serve.add_argument(
        "--executor",
        default="local",
        choices=executor_names(),
        help="who runs placed jobs: the submitter (local) or a scheduler plugin's cluster",
    )
    serve.add_argument(
        "--prices",
        default="",
        help="price book YAML: the pool meters its jobs into the cost store, so budgets see "
        "them (without it, budgets count only charges others record)",
    )
    serve.add_argument(
        "--drain-stragglers",
        action="store_true",
        help="drain a balanced run's straggler node and requeue its job when that pays "
        "(off: stragglers are reported only)",
    )
    serve.add_argument("--cost-db", default="", help="cost store (XIRANG_HOME/cost/cost.db)")
    serve.set_defaults(run=_serve)

    for name, helptext in (("status", "pool summary"), ("queue", "queued jobs in order")):
        add(name, help=helptext).set_defaults(run=_view, path=f"/v1/{name}")
    jobs = add("jobs", help="jobs you may see")
    jobs.add_argument("--state", default="")
    jobs.set_defaults(run=_view, path="/v1/jobs")

    history = add("history", help="what happened to a job, and why")
    history.add_argument("job", type=int)
    history.set_defaults(run=_history)

    cancel = add("cancel", help="cancel a job")
    cancel.add_argument("job", type=int)
    cancel.set_defaults(run=lambda a: _print(a, _client(a).cancel(a.job)))

    quota = add("quota", help="show quotas, or set one (operator)")
    quota.add_argument("project", nargs="?")
    quota.add_argument("--guaranteed", type=int)
    quota.add_argument("--borrow-limit", type=int)
    quota.add_argument("--team")
    quota.add_argument(
        "--max-priority",
        choices=list(PRIORITIES),
        help="highest priority class the project's jobs may ask for (default normal)",
    )
    quota.add_argument(
        "--run-as",
        metavar="USER",
        help="the Unix account the project's jobs run as (needed by --executor slurm; a "
        "login account, uid UID_MIN..UID_MAX, that no other project holds; '' clears it)",
    )
    quota.add_argument(
        "--shared-account",
        action="store_true",
        help="let --run-as name an account another project holds (they read each other's files)",
    )
    quota.add_argument(
        "--umask",
        metavar="OCTAL",
        help="the umask the project's jobs run with (default 077: what they create is theirs)",
    )
    quota.add_argument(
        "--max-jobs",
        type=int,
        metavar="N",
        help="jobs the project may have queued or running at once (more: 429; default 2000)",
    )
    quota.add_argument(
        "--max-payload-bytes",
        type=int,
        metavar="BYTES",
        help="JSON bytes of those jobs' payloads together (more: 413; default 32 MiB)",
    )
    quota.add_argument(
        "--rate",
        type=float,
        metavar="PER_S",
        help="requests per second the project may send (more: 429 with Retry-After; "
        "0, the default: no limit)",
    )
    quota.add_argument(
        "--burst",
        type=int,
        metavar="N",
        help="requests it may send at once above the rate (0, the default: the rate's second)",
    )
    quota.add_argument("--rotate-token", action="store_true")
    quota.set_defaults(run=_quota)

    drain = add("drain", help="take a node out of service; its jobs are requeued")
    drain.add_argument("node")
    drain.add_argument("--reason", default="drained by operator")
    drain.set_defaults(
        run=lambda a: _print(
            a, _operator_client(a).call("POST", f"/v1/nodes/{a.node}/drain", {"reason": a.reason})
        )
    )
    undrain = add("undrain", help="put a node back into service")
    undrain.add_argument("node")
    undrain.set_defaults(
        run=lambda a: _print(a, _operator_client(a).call("POST", f"/v1/nodes/{a.node}/undrain", {}))
    )

    simulate = add("simulate", help="replay a job trace under policies")
    simulate.add_argument("--trace", required=True)
    simulate.add_argument("--cluster", required=True)
    simulate.add_argument(
        "--policy", default="fifo,priority,hetero", help="comma-separated policy names"
    )
    simulate.add_argument("--limit", type=int, default=0, help="first N jobs only")
    simulate.add_argument("--seed", type=int, default=0, help="job-class assignment seed")
    simulate.add_argument("--out", default="", help="folder for results.json and plots")
    simulate.add_argument(
        "--mixing",
        default="off",
        help="comma-separated: off (one device type per job), even (jobs may mix, batch split "
        "evenly), balanced (jobs may mix, shares by speed)",
    )
    simulate.add_argument(
        "--load",
        default="1",
        help="comma-separated offered loads: inter-arrival times divided by each (0.5,1,1.5,2)",
    )
    simulate.add_argument("--plot", default="", help="PNG file: mean JCT against load")
    simulate.set_defaults(run=_simulate)
    return parser


def _client_options(parser: argparse.ArgumentParser, after_command: bool) -> None:
    """--url, --token and --json, before the command; after it as well, where they default
    to nothing (SUPPRESS) so that an option given before the command is kept."""
    unset = argparse.SUPPRESS if after_command else None
    parser.add_argument(
        "--url",
        default=unset or "",
        help="pool service URL, or the replicas' URLs comma-separated (XIRANG_POOL_URL)",
    )
    parser.add_argument("--token", default=unset or "", help="token (XIRANG_POOL_TOKEN)")
    parser.add_argument(
        "--json", action="store_true", default=unset or False, help="machine-readable output"
    )


def _history(args: argparse.Namespace) -> int:
    answer = _client(args).call("GET", f"/v1/jobs/{args.job}/history")
    if args.json:
        return _print(args, answer)
    from xirang_service.pool.report import print_history

    print_history(answer)
    return 0


def _client(args: argparse.Namespace) -> PoolClient:
    """For every command: ``--token``, else XIRANG_POOL_TOKEN; without either, the operator's
    token wherever the docs keep it (:func:`_operator_client`), so an operator who exported
    only XIRANG_POOL_OPERATOR_TOKEN reads ``pool status`` and the quotas with it too."""
    client = PoolClient(args.url, args.token)
    return client if client.token else _operator_client(args)


def _operator_client(args: argparse.Namespace) -> PoolClient:
    """For the operator's commands (setting a quota, drain, undrain): a token given wins,
    ``--token``, then XIRANG_POOL_OPERATOR_TOKEN, then XIRANG_POOL_TOKEN; only without any
    the token file ``xirang pool serve`` kept beside its default state, and only when that
    service was last started at the URL this command targets (a file left by another pool,
    or by one that never started, would be refused as "invalid token")."""
    client = PoolClient(args.url, args.token)
    if args.token:
        return client
    if os.environ.get(OPERATOR_TOKEN_ENV):
        return PoolClient(args.url, os.environ[OPERATOR_TOKEN_ENV], source=OPERATOR_TOKEN_ENV)
    if client.token:
        return client
    kept = kept_operator_token(default_state(), client.url)
    return PoolClient(client.urls, kept[0], source=f"the file {kept[1]}") if kept else client


def kept_operator_token(state: str, url: str) -> tuple[str, Path] | None:
    """The token ``xirang pool serve`` kept for ``state`` and the file holding it, when that
    service last served at ``url``; None otherwise."""
    token_file = beside_state(state, TOKEN_SUFFIX)
    served_at = beside_state(state, URL_SUFFIX)
    if not token_file.is_file() or not served_at.is_file():
        return None
    if served_at.read_text().strip().rstrip("/") != url.rstrip("/"):
        return None
    return token_file.read_text().strip(), token_file


def _print(args: argparse.Namespace, answer: Any) -> int:
    if args.json or not isinstance(answer, list | dict):
        print(json.dumps(answer, indent=2, default=str))
        return 0
    from xirang_service.pool.report import print_answer

    print_answer(answer)
    return 0


def _view(args: argparse.Namespace) -> int:
    """``status`` (one answer), or ``queue`` and ``jobs``: lists, read page after page."""
    path = args.path + (f"?state={args.state}" if getattr(args, "state", "") else "")
    client = _client(args)
    return _print(args, client.call("GET", path) if path == "/v1/status" else client.listing(path))


#: a project's limits (docs/pool.md, Limits per tenant), as ``xirang pool quota`` sets them
_LIMITS = ("max_jobs", "max_payload_bytes", "rate", "burst")


def _quota(args: argparse.Namespace) -> int:
    if not args.project:
        return _print(args, _client(args).listing("/v1/projects"))
    body: dict[str, Any] = {"rotate_token": args.rotate_token}
    if args.shared_account:
        body["shared_account"] = True
    settable = ("guaranteed", "borrow_limit", "team", "max_priority", "run_as", "umask", *_LIMITS)
    for key in settable:
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    return _print(args, _operator_client(args).call("PUT", f"/v1/projects/{args.project}", body))


def _serve(args: argparse.Namespace) -> int:
    from xirang_service.web import require

    require("xirang pool serve")
    from xirang_service.web.server import settle_heap

    replica, server, token_file, budgets = _started(args)
    settle_heap()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    _record_url(args.state, token_file, str(host), int(port))
    service = replica.service
    role = (
        f"{service.restored} job(s) restored"
        if service is not None
        else f"standing by: the leader is {replica.leader or 'not known yet'}"
    )
    print(
        f"xirang pool: http://{host}:{port} (state {redact(args.state)}, policy "
        f"{args.policy}, {role})",
        flush=True,
    )
    if token_file:
        print(f"operator token written to {token_file}", flush=True)
    if not budgets.metered:
        print(
            "xirang pool: no --prices, so pool jobs are not metered here; budgets act only on "
            "charges recorded elsewhere (runs, `xirang console --prices`)",
            flush=True,
        )
    with contextlib.suppress(KeyboardInterrupt):
        replica.run(stop)
    server.shutdown()
    replica.close()  # a leader's lease goes with its connection: a standby takes over now
    budgets.close()
    return 0


def _started(args: argparse.Namespace) -> tuple[Any, Any, str, PoolBudgets]:
    """The replica over its store, leading if it took the store's lease (a first start, or
    no other replica serves a PostgreSQL store), and its server bound to the port; with the
    token file it generated ('' when the token came from the environment) and the budgets.
    A start that fails (no --cluster for a new pool, a bad cluster file or policy, a port
    in use, an SQLite store another server holds) removes every file it created, so no
    empty store or orphaned token is left to be found later."""
    from xirang_service.pool.replica import Replica
    from xirang_service.pool.store import PoolStore

    paths = _state_files(args.state, args.cost_db)
    created = [p for p in paths if not p.exists()]
    folders = sorted({p.parent for p in created if not p.parent.exists()}, reverse=True)
    opened: list[Callable[[], None]] = []  # what to close if the start fails, in order
    try:
        budgets = _budgets(args.prices, args.cost_db)
        opened.append(budgets.close)
        token, token_file = _operator_token(beside_state(args.state, TOKEN_SUFFIX))
        build = _builder(args, token, budgets)
        replica = Replica(PoolStore(args.state), partial(PoolStore, args.state), build, "")
        opened.append(replica.close)
        server = _listening(replica, args)
        opened.append(server.server_close)
        replica.url = args.advertise or _advertised(*server.server_address[:2])
        replica.step()
        return replica, server, token_file, budgets
    except BaseException:
        for close in reversed(opened):
            close()
        for path in created:
            path.unlink(missing_ok=True)
        for folder in folders:  # deepest first; only what this start made and left empty
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def _builder(args: argparse.Namespace, token: str, budgets: PoolBudgets) -> Any:
    """How a replica that took the lease builds the pool over its store: every term gets
    its own executor (a new leader adopts the running jobs' stored handles)."""
    from xirang_service.pool.service import PoolService

    def build(store: Any) -> PoolService:
        cluster = args.cluster or _inventory_cluster_file(args, store)
        executor = _executor(args.executor)
        return PoolService(
            store,
            cluster,
            args.policy,
            token,
            executor,
            budgets=budgets,
            drain_stragglers=args.drain_stragglers,
        )

    return build


def _advertised(host: str, port: int) -> str:
    """The URL a leader records for the standbys to name: its host, or, bound to every
    address, this machine's name."""
    if host in ("0.0.0.0", "::"):
        host = socket.getfqdn()
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _listening(replica: Any, args: argparse.Namespace) -> Any:
    """The replica's server, bound to ``--host``/``--port``; one clear error when it cannot be."""
    from xirang_service.pool.rest import serve_replica

    try:
        return serve_replica(replica, args.host, args.port)
    except OSError as exc:
        raise PoolError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); another service "
            "may hold that port: choose another with --port (or --host)"
        ) from None


def _state_files(state: str, cost_db: str) -> list[Path]:
    """Every file ``xirang pool serve`` may create for ``state`` and its cost store."""
    from xirang_service.cost.store import default_path

    kept = [beside_state(state, s) for s in (TOKEN_SUFFIX, URL_SUFFIX, ".cluster.yaml")]
    sqlite = ("", "-wal", "-shm", "-journal")
    cost = [Path(f"{cost_db or default_path()}{s}") for s in sqlite]
    if "://" in state:
        return kept + cost
    return [Path(state + s) for s in (*sqlite, LOCK_SUFFIX)] + kept + cost


def _record_url(state: str, token_file: str, host: str, port: int) -> None:
    """Beside the generated token, the URL this service answers at: the operator's commands
    use the kept token only for that URL. A token from the environment removes the record,
    so an older kept file is not taken for this service's."""
    record = beside_state(state, URL_SUFFIX)
    if not token_file:
        record.unlink(missing_ok=True)
        return
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    record.unlink(missing_ok=True)  # private_file leaves an existing file as it is
    private_file(record, f"http://{f'[{host}]' if ':' in host else host}:{port}\n")


def _budgets(prices: str, cost_db: str) -> PoolBudgets:
    """Budgets over the cost store; a price book also meters the pool's jobs and gives the
    scheduler its placement preferences (cheap windows, deadlines, efficient device types)."""
    from xirang_service.cost.governor import PoolBudgets

    return PoolBudgets.from_file(prices or None, cost_db or None)


def _operator_token(path: Path) -> tuple[str, str]:
    """The operator token from the environment, else one kept in ``path`` (mode 0600; one
    an earlier version or a hand left readable to others is made 0600 again)."""
    if os.environ.get(OPERATOR_TOKEN_ENV):
        return os.environ[OPERATOR_TOKEN_ENV], ""
    if not path.exists():
        private_file(path, new_token())
    if path.stat().st_mode & 0o077:
        path.chmod(0o600)
    return path.read_text().strip(), str(path)


def _inventory_cluster_file(args: argparse.Namespace, store: Any) -> str | None:
    """With a cluster's executor (Slurm) and no cluster file, the nodes come from the
    scheduler plugin's inventory (``scontrol``)."""
    if args.executor == LOCAL_EXECUTOR or store.initialised():
        return None
    if not _scheduler(args.executor).inventory:
        return None
    import yaml

    nodes = import_target(_scheduler(args.executor).inventory)
    path = beside_state(args.state, ".cluster.yaml")
    path.write_text(yaml.safe_dump({"nodes": nodes()}))
    return str(path)


def _executor(name: str) -> Any:
    """The executor a scheduler plugin names (``local``: none, the submitter runs the job)."""
    return None if name == LOCAL_EXECUTOR else import_target(_scheduler(name).executor)()


def _scheduler(name: str) -> SchedulerSpec:
    spec = get_registry().spec("scheduler", name)
    assert isinstance(spec, SchedulerSpec)
    return spec


def executor_names() -> list[str]:
    """``local`` and every scheduler plugin that can run the pool's placed jobs."""
    registry = get_registry()
    found = [n for n in registry.names("scheduler") if _scheduler(n).executor]
    return [LOCAL_EXECUTOR, *found]


def _loads(text: str) -> tuple[float, ...]:
    """``--load``'s factors; a word or a factor that is not positive is a clear error."""
    try:
        loads = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        loads = ()
    if not loads or not all(0 < load < math.inf for load in loads):
        raise PoolError(f"--load {text}: comma-separated positive factors, e.g. 0.5,1,1.5,2")
    return loads


def _simulate(args: argparse.Namespace) -> int:
    from xirang_service.pool.sim.compare import compare

    results = compare(
        args.trace,
        args.cluster,
        args.policy.split(","),
        args.limit,
        args.seed,
        args.out or None,
        tuple(m.strip() for m in args.mixing.split(",")),
        _loads(args.load),
        args.plot or None,
    )
    if args.json:
        print(json.dumps([r.row() for r in results], indent=2))
    return 0
