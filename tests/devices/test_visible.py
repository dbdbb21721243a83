"""The one mapping from vendor device indices to torch ordinals, under each vendor's rules for
its visible-devices variables."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xirang.devices.reading import DeviceReading
from xirang.devices.visible import ascend, cuda, rocm, select
from xirang_core.specs import HealthFinding, InterconnectGroup, Topology

#: four GPUs as NVML lists them (PCI order), the third with two MIG instances
GPUS = tuple(
    DeviceReading(
        i,
        model="NVIDIA A100-SXM4-80GB",
        pci_bus_id=f"00000000:{0x07 + 8 * i:02X}:00.0",
        uuid=f"GPU-{i}e4b7a90-13cd-4f2e-a6b8-5d9c0e1f2a0{i}",
        extra={"mig_uuids": ("MIG-aa11", "MIG-bb22")} if i == 2 else {},
    )
    for i in range(4)
)


def vendor(devices) -> list[int]:
    return [d.index for d in devices]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2,3", [2, 3]),
        ("3,1", [3, 1]),  # torch numbers them in the variable's order
        ("", []),
        ("-1", []),
        ("1,-1,2", [1]),  # a negative entry ends the list
        ("0,7,1", [0]),  # so does one that names no device
        ("1gpu,2", [1, 2]),  # indices are read like strtoul
        ("1,1", []),  # a device twice: none visible
        ("GPU-3e4b7a90,GPU-0e4b", [3, 0]),  # unique UUID prefixes
        ("MIG-bb22", [2]),  # a MIG instance is its parent GPU
        ("MIG-GPU-1e4b7a90-13cd-4f2e-a6b8-5d9c0e1f2a01/1/0", [1]),  # the legacy MIG form
        ("MIG-aa11,MIG-bb22", [2]),  # CUDA enumerates one MIG instance
    ],
)
def test_cuda_visible_devices(value: str, expected: list[int]) -> None:
    assert vendor(cuda(GPUS, {"CUDA_VISIBLE_DEVICES": value}).devices) == expected


def test_unset_means_every_gpu() -> None:
    assert vendor(cuda(GPUS, {}).devices) == [0, 1, 2, 3]


def test_pci_bus_order_sorts_by_bus_id_before_indexing() -> None:
    shuffled = (GPUS[2], GPUS[0], GPUS[3], GPUS[1])
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert vendor(cuda(shuffled, env).devices) == [0, 1]


def test_mixed_models_without_pci_order_are_flagged() -> None:
    mixed = (GPUS[0], DeviceReading(1, model="NVIDIA L4"))
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in cuda(mixed, {}).problem
    assert cuda(mixed, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).problem == ""


def test_a_bad_entry_is_named() -> None:
    assert "'7' names no device" in cuda(GPUS, {"CUDA_VISIBLE_DEVICES": "0,7"}).problem


def test_rocr_selects_first_then_hip_indexes_what_is_left() -> None:
    amd = tuple(DeviceReading(i, uuid=f"0x18f68e602b8a790{i}") for i in range(4))
    env = {"ROCR_VISIBLE_DEVICES": "GPU-18f68e602b8a7903,1,2", "HIP_VISIBLE_DEVICES": "2,0"}
    assert vendor(rocm(amd, env).devices) == [2, 3]
    assert vendor(rocm(amd, {"CUDA_VISIBLE_DEVICES": "1"}).devices) == [1]  # HIP honours it
    assert vendor(rocm(amd, {"HIP_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "1"}).devices) == [
        3
    ]


def test_ascend_rt_visible_devices() -> None:
    npus = tuple(DeviceReading(i) for i in range(8))
    assert vendor(ascend(npus, {"ASCEND_RT_VISIBLE_DEVICES": "4,5"}).devices) == [4, 5]


def test_findings_topology_and_power_follow_the_ordinals() -> None:
    seen = cuda(GPUS, {"CUDA_VISIBLE_DEVICES": "2,3"})
    findings = [
        HealthFinding(0, "ecc", "drain", "another job's GPU"),
        HealthFinding(3, "ecc", "drain", "ours"),
        HealthFinding(None, "driver", "warn", "the node"),
    ]
    assert [(f.device, f.message) for f in seen.findings(findings)] == [
        (1, "ours"),
        (None, "the node"),
    ]
    links = Topology(
        (InterconnectGroup("nv0", "nvlink", (0, 1)), InterconnectGroup("nv1", "nvlink", (2, 3)))
    )
    assert seen.topology(links).groups == (InterconnectGroup("nv1", "nvlink", (0, 1)),)
    assert seen.by_ordinal({0: 100.0, 2: 300.0, 3: 310.0}) == {0: 300.0, 1: 310.0}


@given(st.permutations(range(4)), st.integers(0, 4))
def test_index_lists_map_each_ordinal_to_the_listed_gpu(order: list[int], keep: int) -> None:
    value = ",".join(map(str, order[:keep]))
    chosen, problem = select(list(GPUS), value, "CUDA_VISIBLE_DEVICES")
    assert vendor(chosen) == order[:keep] and problem == ""
