"""``xirang pool``: run the pool service, use it, and simulate policies on traces.

    xirang pool serve --cluster cluster.yaml [--store pool.db | postgresql://..]
                      [--policy ..] [--prices book.yaml] [--cost-db cost.db]
    xirang pool status | queue | jobs [--state running]
    xirang pool cancel JOB
    xirang pool quota [PROJECT --guaranteed N --borrow-limit N --team T
                               --max-priority CLASS --run-as USER]
    xirang pool drain NODE [--reason TEXT] | undrain NODE
    xirang pool simulate --trace philly.csv --cluster cluster.yaml
                         --policy fifo,priority,hetero

Clients read XIRANG_POOL_URL and XIRANG_POOL_TOKEN (a project's token, or the operator's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xirang_core.paths import private_file, xirang_home
from xirang_core.plugins import get_registry
from xirang_core.specs import SchedulerSpec, import_target
from xirang_core.terminal import help_text
from xirang_service.pool.client import PoolClient
from xirang_service.pool.jobs import PRIORITIES

if TYPE_CHECKING:
    from xirang_service.cost.governor import PoolBudgets

OPERATOR_TOKEN_ENV = "XIRANG_POOL_OPERATOR_TOKEN"
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
    parser.add_argument("--url", default="", help="pool service URL (XIRANG_POOL_URL)")
    parser.add_argument("--token", default="", help="token (XIRANG_POOL_TOKEN)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the pool service")
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
    serve.add_argument("--cost-db", default="", help="cost store (XIRANG_HOME/cost/cost.db)")
    serve.set_defaults(run=_serve)

    for name, helptext in (("status", "pool summary"), ("queue", "queued jobs in order")):
        sub.add_parser(name, help=helptext).set_defaults(run=_view, path=f"/v1/{name}")
    jobs = sub.add_parser("jobs", help="jobs you may see")
    jobs.add_argument("--state", default="")
    jobs.set_defaults(run=_view, path="/v1/jobs")

    cancel = sub.add_parser("cancel", help="cancel a job")
    cancel.add_argument("job", type=int)
    cancel.set_defaults(run=lambda a: _print(a, _client(a).cancel(a.job)))

    quota = sub.add_parser("quota", help="show quotas, or set one (operator)")
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
        help="the Unix account the project's jobs run as (needed by --executor slurm)",
    )
    quota.add_argument("--rotate-token", action="store_true")
    quota.set_defaults(run=_quota)

    drain = sub.add_parser("drain", help="take a node out of service; its jobs are requeued")
    drain.add_argument("node")
    drain.add_argument("--reason", default="drained by operator")
    drain.set_defaults(
        run=lambda a: _print(
            a, _operator_client(a).call("POST", f"/v1/nodes/{a.node}/drain", {"reason": a.reason})
        )
    )
    undrain = sub.add_parser("undrain", help="put a node back into service")
    undrain.add_argument("node")
    undrain.set_defaults(
        run=lambda a: _print(a, _operator_client(a).call("POST", f"/v1/nodes/{a.node}/undrain", {}))
    )

    simulate = sub.add_parser("simulate", help="replay a job trace under policies")
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
    simulate.set_defaults(run=_simulate)
    return parser


def _client(args: argparse.Namespace) -> PoolClient:
    return PoolClient(args.url, args.token)


def _operator_client(args: argparse.Namespace) -> PoolClient:
    """For the operator's commands (setting a quota, drain, undrain): ``--token``, else
    XIRANG_POOL_OPERATOR_TOKEN, else the token file ``xirang pool serve`` wrote beside its
    default state on this machine, else XIRANG_POOL_TOKEN (a project's: the service then
    answers that the operator's token is needed). A project's exported token never shadows
    the operator's own."""
    token_file = _beside_state(default_state(), ".operator-token")
    kept = token_file.read_text().strip() if token_file.is_file() else ""
    return PoolClient(args.url, args.token or os.environ.get(OPERATOR_TOKEN_ENV) or kept)


def _print(args: argparse.Namespace, answer: Any) -> int:
    if args.json or not isinstance(answer, list | dict):
        print(json.dumps(answer, indent=2, default=str))
        return 0
    from xirang_service.pool.report import print_answer

    print_answer(answer)
    return 0


def _view(args: argparse.Namespace) -> int:
    path = args.path + (f"?state={args.state}" if getattr(args, "state", "") else "")
    return _print(args, _client(args).call("GET", path))


def _quota(args: argparse.Namespace) -> int:
    if not args.project:
        return _print(args, _client(args).call("GET", "/v1/projects"))
    body: dict[str, Any] = {"rotate_token": args.rotate_token}
    for key in ("guaranteed", "borrow_limit", "team", "max_priority", "run_as"):
        if getattr(args, key) is not None:
            body[key] = getattr(args, key)
    return _print(args, _operator_client(args).call("PUT", f"/v1/projects/{args.project}", body))


def _serve(args: argparse.Namespace) -> int:
    from xirang_service.web import require

    require("xirang pool serve")
    from xirang_service.pool.rest import serve
    from xirang_service.pool.service import PoolService
    from xirang_service.pool.store import PoolStore
    from xirang_service.web.server import settle_heap

    token, token_file = _operator_token(_beside_state(args.state, ".operator-token"))
    store = PoolStore(args.state)
    service = PoolService(
        store,
        args.cluster or _inventory_cluster_file(args, store),
        args.policy,
        token,
        executor=_executor(args.executor),
        budgets=_budgets(args.prices, args.cost_db),
    )
    server = serve(service, args.host, args.port)
    settle_heap()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    print(
        f"xirang pool: http://{host}:{port} (state {store.path}, policy {args.policy}, "
        f"{service.restored} job(s) restored)",
        flush=True,
    )
    if token_file:
        print(f"operator token written to {token_file}", flush=True)
    if not service.budgets.metered:
        print(
            "xirang pool: no --prices, so pool jobs are not metered here; budgets act only on "
            "charges recorded elsewhere (runs, `xirang console --prices`)",
            flush=True,
        )
    try:
        while not stop.wait(2.0):
            service.tick()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    service.store.close()
    service.budgets.close()
    return 0


def _budgets(prices: str, cost_db: str) -> PoolBudgets:
    """Budgets over the cost store; a price book also meters the pool's jobs and gives the
    scheduler its placement preferences (cheap windows, deadlines, efficient device types)."""
    from xirang_service.cost.governor import PoolBudgets

    return PoolBudgets.from_file(prices or None, cost_db or None)


def _beside_state(location: str, suffix: str) -> Path:
    """A file kept with the state: beside an SQLite file, or in XIRANG_HOME for a database URL
    (named by a hash of the URL, so no password lands in a file name)."""
    if "://" not in location:
        return Path(location + suffix)
    digest = hashlib.sha256(location.encode()).hexdigest()[:12]
    return xirang_home() / f"pool-{digest}{suffix}"


def _operator_token(path: Path) -> tuple[str, str]:
    """The operator token from the environment, else one kept in ``path`` (mode 0600; one
    an earlier version or a hand left readable to others is made 0600 again)."""
    if os.environ.get(OPERATOR_TOKEN_ENV):
        return os.environ[OPERATOR_TOKEN_ENV], ""
    if not path.exists():
        import secrets

        private_file(path, secrets.token_urlsafe(24))
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
    path = _beside_state(args.state, ".cluster.yaml")
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
    )
    if args.json:
        print(json.dumps([r.row() for r in results], indent=2))
    return 0
