"""Secrets stay secret: a PostgreSQL password never shows in any form it is given, and the
files that hold tokens or state are created readable by their owner alone."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from xirang_service.console.metrics_store import MetricsStore
from xirang_service.cost.store import CostStore
from xirang_service.pool.cli import _operator_token
from xirang_service.pool.database import redact
from xirang_service.pool.errors import PoolError
from xirang_service.pool.store import PoolStore

#: (password, a store URL that carries it; {sock} is a folder with no server in it)
FORMS = [
    ("Xq9/Zr7@Wk3", "postgresql://alice:Xq9/Zr7@Wk3@/pool?host={sock}&connect_timeout=2"),
    ("Hn2xYz8", "postgresql://alice@/pool?host={sock}&password=Hn2xYz8&connect_timeout=2"),
    ("Qm4@Vb6/Pj5", "postgresql://alice@/pool?password=Qm4@Vb6/Pj5&host={sock}"),
    ("Rt5 Gh6", "postgresql://alice:Rt5 Gh6@/pool?host={sock}"),
    ("Kp7Lm2x", "postgresql://alice@/pool?host={sock}&sslpassword=Kp7Lm2x&connect_timeout=2"),
]


@pytest.mark.parametrize(("password", "url"), FORMS)
def test_a_postgresql_password_never_shows(tmp_path: Path, password: str, url: str) -> None:
    url = url.format(sock=tmp_path)
    assert password not in redact(url) and "***" in redact(url)
    with pytest.raises(PoolError) as err:
        PoolStore(url)
    assert password not in str(err.value)
    pieces = password.replace("@", "/").replace(" ", "/").split("/")
    assert not [p for p in pieces if p in str(err.value)], str(err.value)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created world-readable unless asked not to."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_state_and_token_files_are_created_0600(tmp_path: Path, umask_022: None) -> None:
    store = PoolStore(tmp_path / "pool.db")
    store.set_meta("k", "v")
    metrics = MetricsStore(tmp_path / "console" / "metrics.db")
    costs = CostStore(tmp_path / "cost.db")
    _operator_token(tmp_path / "pool.db.operator-token")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"pool.db", "pool.db-wal", "metrics.db", "cost.db"} <= {p.name for p in files}
    assert {p.name: oct(mode(p)) for p in files} == {p.name: oct(0o600) for p in files}
    store.close()
    costs.close()
    del metrics
