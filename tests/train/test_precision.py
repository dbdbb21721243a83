"""trainer.precision: validated at compose and against the device, autocast, the fp16 scaler,
FSDP2's policy, fp32 master weights, and bf16 training like fp32."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from xirang_ckpt.export import model_tensors
from xirang_cpu.backend import CpuBackend

from tests.conftest import run_dirs
from xirang_core.checkpoint.store import CheckpointStore
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.run import check_trainer_support, slower_precision
from xirang_core.train.precision import Precision, fsdp_policy


def test_an_unknown_precision_is_refused_at_compose_listing_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"trainer.precision='fp8'.*fp32, bf16, fp16"):
        compose(["trainer.precision=fp8"])


class NoBf16(CpuBackend):
    def supports_dtype(self, name: str) -> bool:
        return name != "bfloat16"


def test_bf16_on_a_device_without_it_is_a_config_error(tiny: dict[str, Any]) -> None:
    config = {**tiny, "trainer": {**tiny["trainer"], "precision": "bf16"}}
    with pytest.raises(ConfigError, match=r"trainer.precision=bf16.*valid on this device: fp32"):
        check_trainer_support(config, NoBf16())
    check_trainer_support(config, CpuBackend())  # the host CPU computes in bf16


def test_a_16_bit_precision_slower_than_fp32_here_is_named_with_both_figures() -> None:
    # calibrated TFLOP/s of an AVX2-only AMD EPYC (no bf16 kernels) and of an AMX Xeon
    emulated = {"float32": 0.0425, "bfloat16": 0.0006}
    message = slower_precision("bf16", emulated)
    assert message is not None
    assert "trainer.precision=bf16" in message and "0.0006" in message and "0.0425" in message
    assert "trainer.precision=fp32 will train faster" in message
    assert slower_precision("bf16", {"float32": 0.29, "bfloat16": 2.3}) is None
    assert slower_precision("fp32", emulated) is None
    assert slower_precision("fp16", emulated) is None  # not measured: nothing to say


def test_fp16_under_a_pipeline_is_a_config_error(tiny: dict[str, Any]) -> None:
    config = {
        **tiny,
        "trainer": {**tiny["trainer"], "precision": "fp16"},
        "parallel": {"name": "pp", "pp": 2},
    }
    with pytest.raises(ConfigError, match="gradient scaler"):
        check_trainer_support(config, CpuBackend())


def test_autocast_computes_matmuls_in_the_chosen_dtype_and_fp32_is_untouched() -> None:
    layer = torch.nn.Linear(8, 8)
    x = torch.randn(2, 8)
    with Precision("bf16", torch.device("cpu")).autocast():
        assert layer(x).dtype == torch.bfloat16
    with Precision("fp32", torch.device("cpu")).autocast():
        assert layer(x).dtype == torch.float32
    assert layer.weight.dtype == torch.float32


def test_fsdp_policy_gathers_16_bit_parameters_and_reduces_in_fp32() -> None:
    policy = fsdp_policy("bf16")
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32
    assert fsdp_policy("fp32") is None


def test_fp16_scales_the_loss_and_skips_an_overflowed_step(make_trainer: Callable) -> None:
    trainer = make_trainer(precision="fp16")
    scaler = trainer.precision.scaler
    assert scaler is not None and scaler.get_scale() == 65536.0
    trainer.train_step(1)
    assert trainer.skipped_steps == 0
    before = [p.detach().clone() for p in trainer.model.parameters()]
    forward = trainer.model.forward
    trainer.model.forward = lambda x, y: forward(x, y) * 1e36  # finite loss; scaled, it overflows
    trainer.train_step(2)
    assert trainer.skipped_steps == 1
    assert scaler.get_scale() == 65536.0 * scaler.get_backoff_factor()
    for p, q in zip(before, trainer.model.parameters(), strict=True):
        assert torch.equal(p, q)  # no update
        assert q.dtype == torch.float32  # master weights stay fp32


def final(run_xirang: Callable, tmp_path: Path, *args: str) -> tuple[dict[str, Any], Path]:
    result = run_xirang(*args)
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = run_dirs(tmp_path)[-1]
    return json.loads((run_dir / "summary.json").read_text()), run_dir


#: the embedded default, shortened to keep two runs cheap: 40 steps of 8 sequences (the loss
#: falls by 1.5 in them, three times the drop the test asks of both runs)
SHORT = ("trainer.max_steps=40", "trainer.global_batch=8", "trainer.log_every=20")


@pytest.mark.slow
def test_bf16_ends_within_2_percent_of_fp32_and_saves_fp32_weights(
    run_xirang: Callable, tmp_path: Path
) -> None:
    common = ("device=cpu", "trainer.sample_tokens=0", "checkpoint.interval=30", *SHORT)
    fp32, _ = final(run_xirang, tmp_path, *common)
    bf16, run_dir = final(run_xirang, tmp_path, *common, "trainer.precision=bf16")
    assert bf16["precision"] == "bf16" and fp32["precision"] == "fp32"
    assert abs(bf16["final_loss"] - fp32["final_loss"]) <= 0.02 * fp32["final_loss"], (
        bf16["final_loss"],
        fp32["final_loss"],
    )
    assert bf16["final_loss"] < bf16["first_loss"] - 0.5  # both learned, so the match means it
    store = CheckpointStore.at(str(run_dir / "checkpoints"))
    newest = next(c for c in store.candidates() if c.manifest is not None)
    tensors = model_tensors(store, newest.manifest)
    assert tensors and {t.dtype for t in tensors.values()} == {torch.float32}
    # MFU is against the calibrated bf16 peak, fp32's against fp32's
    threads = os.cpu_count()  # one worker takes every core
    (cached,) = (Path(os.environ["XIRANG_HOME"]) / "calibration").glob(f"cpu-*-{threads}threads-*")
    peaks = json.loads(cached.read_text())["best"]["matmul_tflops"]
    assert bf16["peak_tflops"] == round(peaks["bfloat16"], 4)
    # the best figure is kept: a measurement after the fp32 run's start may have beaten it
    assert fp32["peak_tflops"] <= round(peaks["float32"], 4)
    assert fp32["peak_source"].startswith("float32 measured")


@pytest.mark.slow
def test_bf16_under_fsdp2_and_ddp_trains_like_fp32_in_one_process(tiny: dict[str, Any]) -> None:
    from xirang.planning.smoke import run_plans
    from xirang_core.parallel.plan import ParallelPlan

    (reference,) = run_plans(tiny, [ParallelPlan(micro_batch=4)], 6)
    bf16 = {**tiny, "trainer": {**tiny["trainer"], "precision": "bf16"}}
    plans = [ParallelPlan(dp=2, zero=3, micro_batch=2), ParallelPlan(dp=2, zero=0, micro_batch=2)]
    for measured in run_plans(bf16, plans, 6):
        gaps = [abs(a - b) / b for a, b in zip(measured.losses, reference.losses, strict=True)]
        assert max(gaps) < 0.02, (measured.losses, reference.losses)
