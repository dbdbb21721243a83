"""``xirang console``: serve the web console over a running pool's state store.

    xirang console [--state pool.db] [--prices prices.yaml] [--port 8080] [--interval 30]
                   [--session-hours 8]

``--state`` is the file ``xirang pool serve --state`` writes (by default the same as the pool's,
``XIRANG_HOME/pool.db``); the console only reads it.
``--prices`` (a YAML price book: prices, windows, classes, watts, price_per_kwh) turns metering
of pool jobs on; without it the cost pages show what was metered elsewhere (training runs).
The operator token is the pool's (``XIRANG_POOL_OPERATOR_TOKEN`` or the file beside the state,
re-read as the console samples, so a new one ends the old one's sessions).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from pathlib import Path

from xirang_core.errors import ConfigError
from xirang_core.paths import xirang_home
from xirang_core.terminal import help_text
from xirang_service.console.auth import DEFAULT_TTL_S
from xirang_service.console.metrics_store import MetricsStore
from xirang_service.console.source import ConsoleSource
from xirang_service.console.state import operator_token
from xirang_service.cost.meter import Meter
from xirang_service.cost.pricefile import load_pricebook
from xirang_service.cost.store import CostStore
from xirang_service.pool.cli import default_state
from xirang_service.pool.database import redact
from xirang_service.pool.store import PoolStore
from xirang_service.web import require


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    require("xirang console")
    from xirang_service.console.server import Sampler, serve
    from xirang_service.web.server import settle_heap

    source = build_source(args.state, args.prices, args.cost_db, args.metrics_db)
    if not source.operator_token:
        print("note: no operator token found; only project tokens can log in", flush=True)
    source.sample()
    server = serve(source, args.host, args.port, session_ttl_s=_session_ttl_s(args.session_hours))
    settle_heap()
    sampler = Sampler(source, args.interval)
    sampler.start()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host, port = server.server_address[:2]
    print(f"xirang console: http://{host}:{port} (pool state {redact(args.state)})", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    sampler.stop()
    server.shutdown()
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xirang console", description=help_text(__doc__.split("\n\n")[0])
    )
    parser.add_argument(
        "--state",
        default=default_state(),
        help="the pool's state file (pool serve --state; default XIRANG_HOME/pool.db, the pool's)",
    )
    parser.add_argument("--prices", help="price book YAML; meters pool jobs into the cost store")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--interval", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--cost-db", help="cost database (default XIRANG_HOME/cost/cost.db)")
    parser.add_argument("--metrics-db", help="metrics database (default XIRANG_HOME/console/)")
    parser.add_argument(
        "--session-hours",
        type=float,
        default=DEFAULT_TTL_S / 3600,
        help="a browser session ends this long after log-in (default 8)",
    )
    return parser


def _session_ttl_s(hours: float) -> float:
    if not hours > 0:
        raise ConfigError(f"--session-hours {hours}: must be a positive number of hours (e.g. 8)")
    return hours * 3600


def build_source(
    state: str | Path,
    prices: str | Path | None = None,
    cost_db: str | Path | None = None,
    metrics_db: str | Path | None = None,
) -> ConsoleSource:
    """A console source over the pool state at ``state`` (which must already exist)."""
    if not Path(state).is_file():
        raise ConfigError(
            f"--state {redact(str(state))}: no pool state there; start the pool with "
            f"`xirang pool serve --state {redact(str(state))} --cluster FILE` first"
        )
    meter = Meter(load_pricebook(prices)) if prices else None
    metrics = MetricsStore(metrics_db or xirang_home() / "console" / "metrics.db")
    return ConsoleSource(
        PoolStore(state),
        CostStore(cost_db),
        metrics,
        meter,
        operator_token(state),
        reload_operator_token=lambda: operator_token(state),
    )
