"""nvidia-smi's query CSV and header parse into readings, lost GPUs included."""

from __future__ import annotations

from cuda_replay import FIXTURES, replay
from xirang_cuda import smi

from xirang.devices.replay import ReplayRunner


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
    reading = smi.parse_row(line, smi.LEGACY_FIELDS)
    assert reading is not None and reading.ecc_uncorrected is None


def test_a_field_reporting_gpu_is_lost_marks_the_device_lost() -> None:
    lost = "[GPU is lost]"
    line = (
        f"3, {lost}, {lost}, 00000000:4E:00.0, {lost}, 535.161.08, {lost}, {lost}, {lost}, {lost}"
    )
    reading = smi.parse_row(line, smi.LEGACY_FIELDS)
    assert reading is not None and reading.lost == "GPU is lost"


def test_no_driver_reports_why() -> None:
    node = smi.read(replay("nothing-recorded"))
    assert not node.devices and "nvidia-smi not found" in node.problem
    assert (FIXTURES / "dgx_h100" / "query.csv").exists()


# Written by hand, not recorded: a driver-580 answer to the current query (clock-event reasons
# under their post-535 name, then power.draw in watts), with the H200's name, memory and driver
# version as this project's first GPU run printed them, and the answer a driver gives to a field
# it does not know.
H200_ROW = (
    "0, NVIDIA H200, GPU-5c1e, 00000000:19:00.0, 143771, 580.159.04, 33, 0, 0, "
    "0x0000000000000040, 100.52"
)
UNKNOWN_FIELD = 'Field "clocks_event_reasons.active" is not a valid field to query.\n'


def test_a_current_driver_reports_clock_events_and_power() -> None:
    runner = ReplayRunner({smi.QUERY: H200_ROW + "\n", smi.HEADER: "CUDA Version: 13.0\n"})
    node = smi.read(runner)
    (gpu,) = node.devices
    assert (gpu.model, gpu.power_w, gpu.throttle) == (
        "NVIDIA H200",
        100.52,
        ("hardware thermal slowdown",),
    )
    assert (node.driver, node.runtime) == ("580.159.04", "13.0")
    assert smi.LEGACY_QUERY not in runner.calls  # the older query is not asked for


def test_a_driver_before_535_is_asked_with_the_older_field_name() -> None:
    legacy = (FIXTURES / "failed_node" / "query.csv").read_text()
    runner = ReplayRunner({smi.QUERY: UNKNOWN_FIELD, smi.LEGACY_QUERY: legacy})
    node = smi.read(runner)
    assert len(node.devices) == 8 and node.driver
    assert runner.calls[:2] == [smi.QUERY, smi.LEGACY_QUERY]
    assert {d.power_w for d in node.devices} == {None}  # that query has no power column
