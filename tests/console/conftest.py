"""A real pool service and a console serving its state, on free local ports."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.cost.pools import OPERATOR_TOKEN, Pool, make_pool
from xirang_service.console.metrics_store import MetricsStore
from xirang_service.console.server import serve
from xirang_service.console.source import ConsoleSource
from xirang_service.cost.budgets import Budget
from xirang_service.cost.meter import Meter
from xirang_service.cost.pricebook import PriceBook
from xirang_service.cost.store import CostStore
from xirang_service.pool.store import PoolStore

HOUR = 3600


@dataclass
class Console:
    url: str
    pool: Pool
    source: ConsoleSource


@pytest.fixture
def console(tmp_path) -> Iterator[Console]:
    """The pool two hours in, metered once with a price book; vision has a budget."""
    pool = make_pool(tmp_path)
    costs = CostStore(tmp_path / "cost.db")
    costs.set_budget(Budget("project", "nlp", 50_000_000, warn_at=0.5))
    source = ConsoleSource(
        PoolStore(pool.state),
        costs,
        MetricsStore(),
        Meter(PriceBook({"a100": 3.0, "v100": 1.0})),
        OPERATOR_TOKEN,
        clock=pool.clock,
        ttl=0.0,
    )
    for _ in range(3):
        pool.clock.now += HOUR
        source.sample()
    server = serve(source)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield Console(f"http://{host}:{port}", pool, source)
    server.shutdown()
    server.server_close()
    costs.close()
