"""``parallel=auto parallel.smoke=true`` measures plans where the run will train: the smoke
runs and the host probe open their process group with the run's collective backend and ask the
run's device backend for each rank's device (not the CPU and gloo whatever the run's device)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from xirang_core.parallel.plan import ParallelPlan


class Launched(Exception):
    """Raised by the stand-in for ``run_group`` once it has seen how it was called."""


@pytest.fixture
def launches(monkeypatch) -> list[dict[str, Any]]:
    """Calls of ``run_group`` (the spawning of ranks), recorded instead of made."""
    import xirang.comm.launch as launch

    seen: list[dict[str, Any]] = []

    def record(fn, world, *args, backend="gloo", threads=1):
        seen.append({"fn": fn.__name__, "world": world, "args": args, "backend": backend})
        raise Launched

    monkeypatch.setattr(launch, "run_group", record)
    monkeypatch.setattr("xirang_planner.calibrate.run_group", record)  # imported from the SDK
    return seen


def _on_cuda(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "device": {"name": "cuda"}}


def test_smoke_runs_use_the_runs_device_and_collective(tiny_config, launches) -> None:
    from xirang.planning.smoke import run_plans

    with pytest.raises(Launched):
        run_plans(_on_cuda(tiny_config), [ParallelPlan(dp=2, micro_batch=2)], 2)
    [call] = launches
    assert call["backend"] == "nccl"
    assert call["args"][-1].device == {"name": "cuda"}


def test_the_host_probe_uses_the_runs_device_and_collective(tiny_config, launches) -> None:
    from xirang_planner.calibrate import measure_host

    with pytest.raises(Launched):
        measure_host(_on_cuda(tiny_config), 2, [1])
    [call] = launches
    assert (call["fn"], call["backend"]) == ("_probe", "nccl")
    assert call["args"][-1].device == {"name": "cuda"}


def test_a_smoke_rank_trains_on_the_device_its_backend_gives(tiny_config, monkeypatch) -> None:
    from xirang_cpu.backend import CpuBackend

    from xirang.planning.ondevice import RunDevice
    from xirang.planning.smoke import _measure_plans, plan_config

    asked = []

    def torch_device(self, local_rank: int) -> torch.device:
        asked.append(local_rank)
        return torch.device("cpu")

    monkeypatch.setattr(CpuBackend, "torch_device", torch_device)
    config = plan_config(tiny_config, ParallelPlan(micro_batch=8))
    [found] = _measure_plans(0, 1, [config], 2, False, RunDevice({"name": "cpu"}, "gloo"))
    assert asked == [0] and len(found["losses"]) == 2
