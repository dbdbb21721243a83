"""Logical cards become physical devices by per-(class, type) throughput."""

from __future__ import annotations

import pytest

from xirang_service.pool.cards import Throughputs
from xirang_service.pool.errors import PoolError


def _table() -> Throughputs:
    return Throughputs.from_mapping(
        {
            "reference": "v100",
            "classes": {"resnet": {"v100": 8.0, "k80": 1.0}, "lm": {"v100": 2.0, "k80": 1.5}},
            "speed": {"v100": 1.0, "k80": 0.5},
            "max_inflation": 2.0,
        },
        ["k80", "v100"],
    )


def test_a_slower_type_needs_more_devices_per_card() -> None:
    cards = _table()
    assert cards.devices_for("lm", 3, "v100") == 3
    assert cards.devices_for("lm", 3, "k80") == 4  # 3 / 0.75 cards per device


def test_a_type_too_slow_for_a_class_is_not_eligible() -> None:
    assert _table().devices_for("resnet", 1, "k80") is None  # 8x slower > max_inflation


def test_unmeasured_class_falls_back_to_the_type_speed() -> None:
    assert _table().devices_for("gan", 2, "k80") == 4


def test_reference_must_be_a_cluster_type() -> None:
    with pytest.raises(PoolError, match="reference 'a100'"):
        Throughputs.from_mapping({"reference": "a100"}, ["k80", "v100"])
