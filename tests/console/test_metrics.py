"""``/metrics`` scraped and parsed with prometheus_client's own parser."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.console.conftest import HOUR
from tests.cost.pools import OPERATOR_TOKEN
from xirang_service.console.auth import OPERATOR
from xirang_service.console.prometheus import exposition


def scrape(console, token: str) -> dict[str, list]:
    request = urllib.request.Request(console.url + "/metrics")
    request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = answer.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def value(samples: list, **labels: str) -> float:
    [match] = [s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())]
    return match


def test_the_operator_scrapes_capacity_queue_quota_and_cost(console):
    m = scrape(console, OPERATOR_TOKEN)
    assert value(m["xirang_pool_devices"], device_type="a100") == 32
    assert value(m["xirang_pool_devices_healthy"], device_type="v100") == 8
    assert value(m["xirang_pool_devices_allocated"], device_type="a100") == 24
    assert value(m["xirang_pool_utilisation_ratio"], device_type="a100") == 0.75
    assert value(m["xirang_pool_nodes_drained"]) == 1
    assert value(m["xirang_pool_queue_length"], project="vision") == 1
    assert value(m["xirang_pool_quota_cards"], project="nlp", kind="borrowed") == 8
    assert value(m["xirang_cost"], team="research", project="nlp", device_type="a100") == 126.0
    assert m["xirang_cost"][0].name == "xirang_cost_total"  # a counter, standard suffix
    assert value(m["xirang_budget_used_ratio"], scope="project", name="nlp") > 1


def test_a_project_token_scrapes_only_its_own_series(console):
    m = scrape(console, console.pool.tokens["vision"])
    assert {s.labels["project"] for s in m["xirang_pool_queue_length"]} == {"vision"}
    assert m["xirang_cost"] == []  # vision has not run yet
    assert {s.labels["project"] for s in m["xirang_pool_quota_cards"]} == {"vision"}


def test_the_shipped_grafana_dashboard_queries_only_exposed_metrics(console):
    dashboard = Path(__file__).parents[2] / "examples" / "grafana" / "xirang-dashboard.json"
    exprs = [t["expr"] for p in json.loads(dashboard.read_text())["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"xirang_[a-z0-9_]+", e)}
    exposed = {s.name for samples in scrape(console, OPERATOR_TOKEN).values() for s in samples}
    exposed |= set(scrape(console, OPERATOR_TOKEN))  # family names (no samples yet) count too
    assert used and used <= exposed, used - exposed


def test_cost_and_metrics_are_built_once_per_snapshot_and_follow_each_sample(console):
    """Per viewer, a snapshot's cost view and exposition are reused until the next sample;
    then they carry the newly metered hour."""
    source = console.source
    source.ttl = 3600.0
    cost, scrape = source.cost_view(OPERATOR), exposition(source, OPERATOR)
    assert source.cost_view(OPERATOR) is cost and exposition(source, OPERATOR) is scrape
    assert exposition(source, "nlp") != scrape  # each viewer its own
    console.pool.clock.now += HOUR
    source.sample()
    total = source.cost_view(OPERATOR)["by"]["team"]["total"]["amount_micro"]
    assert total > cost["by"]["team"]["total"]["amount_micro"]
    assert exposition(source, OPERATOR) != scrape
