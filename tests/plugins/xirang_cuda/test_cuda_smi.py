"""nvidia-smi's query CSV and header parse into readings, lost GPUs included."""

from __future__ import annotations

from cuda_replay import FIXTURES, replay
from xirang_cuda import smi


def test_dgx_inventory_reads_every_gpu() -> None:
    node = smi.read(replay("dgx_h100"))
    assert node.source == "nvidia-smi"
    assert [d.index for d in node.devices] == list(range(8))
    first = node.devices[0]
    assert first.model == "NVIDIA H100 80GB HBM3"
    assert first.memory_bytes == 81559 * 2**20
    assert first.pci_bus_id == "00000000:18:00.0"
    assert (node.driver, node.runtime) == ("550.54.15", "12.4")


def test_a_lost_gpu_takes_the_index_it_left_empty() -> None:
    node = smi.read(replay("failed_node"))
    lost = [d for d in node.devices if d.lost]
    assert [(d.index, d.pci_bus_id) for d in lost] == [(2, "0000:47:00.0")]
    assert "GPU is lost" in lost[0].lost
    assert len(node.usable) == 7


def test_counters_and_throttle_reasons() -> None:
    node = smi.read(replay("failed_node"))
    by_index = {d.index: d for d in node.devices}
    assert (by_index[5].ecc_corrected, by_index[5].ecc_uncorrected) == (3, 2)
    assert by_index[6].throttle == ("hardware slowdown", "hardware thermal slowdown")
    assert by_index[0].throttle == ()


def test_consumer_gpus_without_ecc_read_as_unknown_not_zero() -> None:
    line = (
        "0, NVIDIA GeForce RTX 4090, GPU-x, 00000000:01:00.0, 24564, 550.54.15, 41, "
        "[N/A], [N/A], 0x0"
    )
    reading = smi.parse_row(line)
    assert reading is not None and reading.ecc_uncorrected is None


def test_a_field_reporting_gpu_is_lost_marks_the_device_lost() -> None:
    lost = "[GPU is lost]"
    line = (
        f"3, {lost}, {lost}, 00000000:4E:00.0, {lost}, 535.161.08, {lost}, {lost}, {lost}, {lost}"
    )
    reading = smi.parse_row(line)
    assert reading is not None and reading.lost == "GPU is lost"


def test_no_driver_reports_why() -> None:
    node = smi.read(replay("nothing-recorded"))
    assert not node.devices and "nvidia-smi not found" in node.problem
    assert (FIXTURES / "dgx_h100" / "query.csv").exists()
