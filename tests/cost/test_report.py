"""Reports: rows add up exactly to the metered total, CSV keeps the exact amounts."""

import csv
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cost.conftest import charge, charges
from xirang_service.cost import report
from xirang_service.cost.errors import CostError


@settings(deadline=None)  # shared CI cores: no per-example time limit
@given(st.lists(charges(), max_size=60), st.sampled_from(sorted(report.GROUPINGS)))
def test_groups_add_up_exactly_to_the_metered_total(items, by):
    rep = report.group(items, by)
    metered = sum(c.amount_micro for c in items)
    assert rep.total.amount_micro == metered
    assert sum(r.amount_micro for r in rep.rows) == metered
    assert sum(r.idle_micro for r in rep.rows) == rep.total.idle_micro


@settings(deadline=None)  # shared CI cores: no per-example time limit
@given(st.lists(charges(), min_size=1, max_size=30))
def test_csv_team_amounts_sum_to_the_total_row(tmp_path_factory, items):
    path = report.write_csv(report.group(items, "team"), tmp_path_factory.mktemp("csv") / "r.csv")
    rows = list(csv.DictReader(path.open()))
    teams, total = rows[:-1], rows[-1]
    assert total["team"] == "total"
    assert sum(Decimal(r["amount"]) for r in teams) == Decimal(total["amount"])
    assert Decimal(total["amount"]) * 10**6 == sum(c.amount_micro for c in items)


def test_rows_are_largest_first_and_carry_unit_output():
    items = [
        charge("nlp", "research", ref="a", amount_micro=2_000_000, tokens=4_000_000),
        charge("vision", "product", ref="b", amount_micro=5_000_000),
    ]
    rep = report.group(items, "project")
    assert [r.key for r in rep.rows] == ["vision", "nlp"]
    assert rep.rows[1].tokens_per_cost == 2_000_000  # 4M tokens for 2.00
    assert rep.rows[0].tokens_per_cost is None


def test_mixed_currencies_are_not_summed():
    with pytest.raises(CostError, match="currencies"):
        report.group([charge(ref="a"), charge(ref="b", currency="EUR")], "team")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", 1000.0 - 7 * 86400),
        ("24h", 1000.0 - 86400),
        ("30m", 1000.0 - 1800),
        ("1970-01-01T00:10:00", 600.0),
        (None, None),
    ],
)
def test_since_accepts_spans_and_dates(text, expected):
    assert report.parse_since(text, now=1000.0) == expected


def test_a_bad_since_says_what_is_accepted():
    with pytest.raises(CostError, match="7d, 24h"):
        report.parse_since("last tuesday")
    with pytest.raises(CostError, match="team, project, device"):
        report.group([], "region")
