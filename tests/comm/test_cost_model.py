"""The ring cost model: formulas, fitting alpha/beta back from timings, cluster predictions."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xirang.comm.cost_model import ClusterDescription, Link, fit_link, ring_time
from xirang_core.errors import ConfigError

LINK = Link(latency_s=10e-6, bandwidth_bps=10e9)


def test_ring_all_reduce_has_latency_and_bandwidth_terms() -> None:
    n, p = 1e8, 4
    expected = 2 * 3 * 10e-6 + 2 * 3 / 4 * n / 10e9
    assert ring_time("all_reduce", n, p, LINK) == pytest.approx(expected)
    assert ring_time("reduce_scatter", n, p, LINK) == pytest.approx(expected / 2)
    assert ring_time("all_reduce", n, 1, LINK) == 0.0


@given(
    alpha=st.floats(1e-6, 1e-3),
    gbps=st.floats(0.1, 400),
    op=st.sampled_from(["all_reduce", "reduce_scatter", "all_gather"]),
)
def test_fit_recovers_the_link_from_its_own_timings(alpha: float, gbps: float, op: str) -> None:
    link = Link(alpha, gbps * 1e9)
    samples = [(n, p, ring_time(op, n, p, link)) for n in (1e3, 1e6, 1e8) for p in (2, 4, 8)]
    fitted = fit_link(op, samples)
    assert math.isclose(fitted.latency_s, alpha, rel_tol=1e-3)
    assert math.isclose(fitted.bandwidth_bps, gbps * 1e9, rel_tol=1e-3)


def test_fit_needs_two_timings() -> None:
    with pytest.raises(ConfigError, match="two or more"):
        fit_link("all_reduce", [(1e6, 2, 0.01)])


CLUSTER = {
    "nodes": 4,
    "devices_per_node": 8,
    "intra": {"latency_us": 5, "bandwidth_gbps": 150},
    "inter": {"latency_us": 20, "bandwidth_gbps": 12.5},
}


def test_cluster_prediction_names_the_slow_level() -> None:
    cluster = ClusterDescription.from_mapping(CLUSTER)
    inside = cluster.predict("all_reduce", 1e9, 8)
    assert inside["bottleneck"] == "all_reduce@intra" and set(inside["levels"]) == {"intra"}
    across = cluster.predict("all_reduce", 1e9, 32)
    assert across["bottleneck"] == "all_reduce@inter"
    assert across["seconds"] == pytest.approx(sum(across["levels"].values()))
    assert across["seconds"] > inside["seconds"]


def test_cluster_description_errors_name_the_expected_keys(tmp_path) -> None:
    with pytest.raises(ConfigError, match="devices_per_node"):
        ClusterDescription.from_mapping({"nodes": 2})
    with pytest.raises(ConfigError, match="no such file"):
        ClusterDescription.load(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="Known: all_reduce"):
        ring_time("gossip", 1.0, 2, LINK)
