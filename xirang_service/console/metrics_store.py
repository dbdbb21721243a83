"""The metrics store: time series the console charts and trends are drawn from.

Samples are ``(time, metric, key, value)`` rows in SQLite (``key`` is a label value such as the
device type). The console's sampler appends one set per interval; charts read a window of one
metric, bucketed so a chart never carries more than ``points`` points however long the window.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path

from xirang_core.paths import private_file

_SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (ts REAL, metric TEXT, key TEXT, value REAL);
CREATE INDEX IF NOT EXISTS samples_metric_ts ON samples (metric, ts);
"""


class MetricsStore:
    """Append-only samples; ``path`` None keeps them in memory (tests, the benchmark)."""

    def __init__(self, path: str | Path | None = None) -> None:
        target = ":memory:"
        if path is not None:
            target = str(private_file(path))
        self._db = sqlite3.connect(target, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._db:
            self._db.executescript(_SCHEMA)

    def record(self, ts: float, samples: Iterable[tuple[str, str, float]]) -> None:
        rows = [(ts, metric, key, float(value)) for metric, key, value in samples]
        with self._lock, self._db:
            self._db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", rows)

    def series(
        self, metric: str, since: float, until: float, points: int = 120
    ) -> dict[str, list[tuple[float, float]]]:
        """Per key, the mean value in each of ``points`` equal buckets of ``[since, until]``."""
        width = max((until - since) / points, 1e-9)
        sql = (
            "SELECT key, CAST((ts - ?) / ? AS INTEGER) AS b, AVG(value) FROM samples "
            "WHERE metric = ? AND ts >= ? AND ts <= ? GROUP BY key, b ORDER BY key, b"
        )
        with self._lock:
            rows = self._db.execute(sql, (since, width, metric, since, until)).fetchall()
        out: dict[str, list[tuple[float, float]]] = {}
        for key, bucket, value in rows:
            out.setdefault(key, []).append((since + (bucket + 0.5) * width, value))
        return out

    def close(self) -> None:
        self._db.close()
