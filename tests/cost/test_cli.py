"""``xirang cost`` as a user runs it: report with findings and CSV, budgets."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time
from decimal import Decimal

import pytest

from tests.cost.conftest import charge
from xirang_service.cost.store import CostStore


def xirang_cost(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xirang", "cost", "--db", str(tmp_path / "cost.db"), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.fixture
def metered(tmp_path):
    now = time.time()
    store = CostStore(tmp_path / "cost.db")
    store.record(
        [
            charge("nlp", "research", ref="1@a", start=now - 3600, amount_micro=1_000_001),
            charge(
                "speech",
                "research",
                ref="2@a",
                start=now - 7200,
                amount_micro=2_000_002,
                held_s=4 * 3600,
                idle_after_s=3600,
            ),
            charge("vision", "product", ref="3@a", start=now - 600, amount_micro=3_333_333),
            charge("old", "product", ref="4@a", start=now - 30 * 86400, amount_micro=9_000_000),
        ]
    )
    store.close()
    return tmp_path


def test_report_by_team_prints_findings_and_writes_an_exact_csv(metered):
    result = xirang_cost(metered, "report", "--by", "team", "--since", "7d", "--csv", "t.csv")
    assert result.returncode == 0, result.stderr
    assert "research" in result.stdout and "product" in result.stdout
    assert "idle_after_end" in result.stdout and "speech" in result.stdout
    rows = list(csv.DictReader((metered / "t.csv").open()))
    assert [r["team"] for r in rows] == ["product", "research", "total"]
    assert Decimal(rows[-1]["amount"]) == Decimal("6.333336")  # the 30-day-old charge is out
    assert sum(Decimal(r["amount"]) for r in rows[:-1]) == Decimal(rows[-1]["amount"])


def test_a_report_writes_a_csv_only_when_asked(metered):
    before = set(metered.iterdir())
    result = xirang_cost(metered, "report", "--by", "device")
    assert result.returncode == 0, result.stderr
    assert "wrote" not in result.stdout and set(metered.iterdir()) == before


def test_budgets_are_set_listed_and_bad_input_is_one_clear_line(metered):
    ok = xirang_cost(metered, "budget", "set", "project", "vision", "4.00", "--warn", "0.5")
    assert ok.returncode == 0, ok.stderr
    listing = xirang_cost(metered, "budget", "list")
    assert "vision" in listing.stdout and "warn" in listing.stdout  # 3.33 of 4.00 spent
    bad = xirang_cost(metered, "budget", "set", "project", "vision", "lots")
    assert bad.returncode != 0 and "give a number" in bad.stderr
    since = xirang_cost(metered, "report", "--since", "yesterday-ish")
    assert since.returncode != 0 and "7d, 24h" in since.stderr and "Traceback" not in since.stderr
