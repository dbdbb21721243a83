"""Collective backends keyed by device type; a backend the device cannot use is refused."""

from __future__ import annotations

import pytest

from xirang.comm.backends import collective_backend
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry


@pytest.mark.parametrize(
    ("device", "requested", "expected"),
    [
        ("cpu", "", "gloo"),
        ("cuda", "", "nccl"),
        ("rocm", "", "nccl"),
        ("rocm", "rccl", "nccl"),
        ("ascend", "", "hccl"),
        ("hpu", "", "hccl"),
        ("cuda", "gloo", "gloo"),
    ],
)
def test_backend_follows_the_device_type(device: str, requested: str, expected: str) -> None:
    assert collective_backend(device, requested) == expected


@pytest.mark.parametrize(("device", "requested"), [("cpu", "nccl"), ("ascend", "gloo")])
def test_a_backend_the_device_cannot_use_is_refused(device: str, requested: str) -> None:
    with pytest.raises(ConfigError, match=f"cannot carry {device} tensors. Usable on {device}"):
        collective_backend(device, requested)


def test_unknown_device_type_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="Known device types: ascend, cpu, cuda"):
        collective_backend("abacus")


@pytest.mark.parametrize(
    "option",
    ["gloo", "fp16", "bf16", "powersgd", "topk", "hierarchical", "mixed", "localsgd", "diloco"],
)
def test_every_gradient_option_opens_gloo_on_cpu(option: str) -> None:
    assert get_registry().create("comm", {"name": option}).backend_for("cpu") == "gloo"


@pytest.mark.parametrize(
    ("option", "serves"), [("nccl", "cuda, rocm"), ("rccl", "rocm"), ("hccl", "ascend")]
)
def test_pinned_backends_refuse_other_devices(option: str, serves: str) -> None:
    with pytest.raises(ConfigError, match=f"comm={option} serves {serves} devices, not cpu"):
        get_registry().create("comm", {"name": option}).backend_for("cpu")


def test_an_explicit_backend_setting_is_checked() -> None:
    with pytest.raises(ConfigError, match="'nccl' cannot carry cpu tensors"):
        get_registry().create("comm", {"name": "fp16", "backend": "nccl"}).backend_for("cpu")
