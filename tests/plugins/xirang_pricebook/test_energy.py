"""Energy of a run: a device plugin's power reading is preferred to the configured watts (and
re-prices an energy-aware policy); on the CPU, which has no reading, the config stays."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from xirang_pricebook import observer
from xirang_pricebook.energy import CONFIGURED, MEASURED, PowerSampler, run_watts

from xirang_service.cost.store import CostStore

BOOK = {"name": "energy_aware", "prices": {"cuda": 2.0, "cpu": 0.05}, "price_per_kwh": 0.25}
SUMMARY = {
    "project": "energy",
    "wall_time_s": 3600.0,
    "world_size": 2,
    "cost": {"amount": 4.35, "currency": "USD"},  # quoted with the configured 700 W
}


class Gpus:
    """A device backend with a power reading, like the CUDA plugin's over NVML."""

    def __init__(self, watts: dict[int, float]) -> None:
        self.watts = watts
        self.reads = 0

    def power_watts(self) -> dict[int, float]:
        self.reads += 1
        return self.watts


def run_ctx(run_dir: str, device: dict, device_type: str, index: int | None = None):
    config = {
        "scheduler": {"name": "local"},
        "device": device,
        "runtime": {"device_type": device_type, "devices": 2},
        "cost": {**BOOK, "watts": {"cuda": 700.0, "cpu": 65.0}},
    }
    torch_device = torch.device("cpu") if index is None else SimpleNamespace(index=index)
    return SimpleNamespace(config=config, run_dir=run_dir, device=torch_device)


def charge_of(run_dir: str):
    store = CostStore()
    try:
        return next(c for c in store.charges(project="energy") if c.ref == run_dir)
    finally:
        store.close()


def test_a_measured_power_reading_wins_over_the_configured_watts(monkeypatch) -> None:
    gpus = Gpus({0: 500.0, 1: 900.0})

    def sampler(ctx) -> PowerSampler:  # the clock stands still: the next read is 30 s away
        return PowerSampler(gpus, ctx.device.index, interval_s=30.0, clock=lambda: 0.0)

    monkeypatch.setattr(observer, "_sampler", sampler)
    ctx = run_ctx("/runs/gpu", {"name": "cuda"}, "cuda", index=0)
    for _ in range(3):
        observer.sample_power(ctx)
    assert gpus.reads == 1
    observer.record_run(ctx, {**SUMMARY, "run_dir": "/runs/gpu"})
    charge = charge_of("/runs/gpu")
    assert charge.energy_wh == pytest.approx(500.0 * 2)  # rank 0's GPU, 2 devices, 1 h
    # re-quoted: 2 devices x 1 h x (2.0 + 0.5 kW x 0.25), not the summary's 700 W quote
    assert charge.amount_micro == 4_250_000


def test_on_the_cpu_the_configured_watts_stay() -> None:
    ctx = run_ctx("/runs/cpu", {"name": "cpu"}, "cpu")
    observer.sample_power(ctx)  # the real CPU backend: no power reading
    observer.record_run(ctx, {**SUMMARY, "run_dir": "/runs/cpu"})
    charge = charge_of("/runs/cpu")
    assert charge.energy_wh == pytest.approx(65.0 * 2)
    assert charge.amount_micro == 4_350_000  # the summary's own quote


def test_the_sampler_keeps_the_mean_and_survives_a_failing_reading() -> None:
    now = [0.0]
    gpus = Gpus({3: 400.0})
    sampler = PowerSampler(gpus, 3, interval_s=10.0, clock=lambda: now[0])
    sampler.sample()
    gpus.watts = {3: 600.0}
    now[0] = 10.0
    sampler.sample()
    assert sampler.mean_w == 500.0

    def broken() -> dict[int, float]:
        raise OSError("NVML went away")

    gpus.power_watts = broken
    failing = PowerSampler(gpus, 3)
    failing.sample()
    assert failing.mean_w is None and not failing.can_measure
    assert run_watts("cuda", None, {"cuda": 700}) == (700.0, CONFIGURED)
    assert run_watts("cuda", 512.0, {"cuda": 700}) == (512.0, MEASURED)


def test_a_measured_reading_under_a_flat_price_keeps_the_summarys_quote(monkeypatch) -> None:
    """The default cost policy (cost=flat) takes no watts: a GPU run with a power reading
    must still be charged (the H200 check's runs failed at their end here)."""
    gpus = Gpus({0: 500.0})
    monkeypatch.setattr(observer, "_sampler", lambda ctx: PowerSampler(gpus, 0))
    ctx = run_ctx("/runs/flat", {"name": "cuda"}, "cuda", index=0)
    ctx.config["cost"] = {"name": "flat", "prices": {"cuda": 2.0}}
    observer.sample_power(ctx)
    observer.record_run(ctx, {**SUMMARY, "run_dir": "/runs/flat"})
    charge = charge_of("/runs/flat")
    assert charge.energy_wh == pytest.approx(500.0 * 2)
    assert charge.amount_micro == 4_350_000  # the summary's own quote
