"""What the run summary and the launch say so a figure or a setting is not misread (issue 53):
where MFU's peak came from, LoRA's trainable parameters and FLOPs, a warm-up longer than the
run, a loss that ended higher than it began."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.plugins.xirang_llama.test_llama_rope_scaling import save_llama
from tests.train.conftest import assembled
from xirang_core.run import warmup_caution
from xirang_core.train import report
from xirang_core.train.worker import trained_fields


def summary(**changed: Any) -> dict[str, Any]:
    """A run's summary.json as a 20-step run writes it, with ``changed`` fields."""
    return {
        "run_dir": "/tmp/run",
        "model": "llama_tiny",
        "params": 1_820_000,
        "steps": 20,
        "tokens": 40_960,
        "first_loss": 8.362,
        "final_loss": 6.1,
        "loss_drop_pct": 27.05,
        "lr": 0.003,
        "val_loss": 6.2,
        "tokens_per_s": 7112.0,
        "mfu": 0.459,
        "peak_tflops": 0.07,
        "peak_source": "float32 measured at load 6.46 on a busy host (no quiet measurement yet)",
        "precision": "fp32",
        "wall_time_s": 5.8,
        "world_size": 1,
        "device": "Intel(R) Xeon(R) Processor",
        **changed,
    }


def printed(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, **kw: Any) -> str:
    """The summary table as a 200-column terminal shows it, rows joined."""
    monkeypatch.setenv("COLUMNS", "200")
    report.print_summary(summary(**kw))
    return capsys.readouterr().out


def test_the_mfu_row_says_where_the_peak_came_from_and_at_what_load(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = printed(capsys, monkeypatch)
    assert (
        "45.9% of 0.070 TFLOP/s (fp32); peak: float32 measured at load 6.46 on a busy host "
        "(no quiet measurement yet)" in out
    )
    sheet = printed(capsys, monkeypatch, peak_source="bfloat16 datasheet", peak_tflops=989.0)
    assert "of 989.000 TFLOP/s (fp32); peak: bfloat16 datasheet" in sheet


def test_a_loss_that_ends_higher_says_it_diverged_with_its_rate_and_a_change(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = printed(capsys, monkeypatch, final_loss=52.323, loss_drop_pct=-525.73, lr=10.0)
    assert "8.362 → 52.323 (526% higher: diverged)" in out
    assert "lower" not in out
    assert (
        "warning: the loss ended higher than it began (8.362 → 52.323): training diverged at "
        "optim.lr=10; try optim.lr=1 (a tenth)" in out
    )
    assert "diverged" not in printed(capsys, monkeypatch)


def test_a_warmup_longer_than_the_run_is_warned_of() -> None:
    optim = {"lr": 0.003, "warmup_steps": 500}
    said = warmup_caution(optim, 20)
    assert said == (
        "optim.warmup_steps=500 is longer than the run (trainer.max_steps=20): the learning "
        "rate climbs only to 4% of optim.lr=0.003 by the last step; use optim.warmup_steps=2 "
        "(a tenth of the run) or a longer run"
    )
    assert warmup_caution({**optim, "warmup_steps": 20}, 20) is None


@pytest.mark.parametrize("lora", [False, True])
def test_lora_counts_trainable_parameters_and_no_weight_gradients_for_frozen_ones(
    lora: bool, tmp_path: Path
) -> None:
    """peft's count (trainable of all parameters) and MFU's FLOPs: 4 per frozen weight (no
    weight gradient), 6 per trained one, instead of 6 over all (1.5x high)."""
    save_llama(tmp_path / "pretrained", None)
    run = ["model=llama_tiny", "tokenizer=bytes", "data.seq_len=16", "trainer.global_batch=8"]
    run += [f"model.pretrained={tmp_path / 'pretrained'}", "device=cpu"]
    run += ["model.lora_rank=4", "model.lora_alpha=8"] if lora else []
    with assembled(run, tmp_path / "run") as parts:
        model = parts.model
        adapters = sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)
        full = 6 * parts.params + 12 * model.cfg.n_layers * model.cfg.dim * 16  # type: ignore[operator]
        trained = parts.trained
        assert trained is not None
        assert trained.total == sum(p.numel() for p in model.parameters())
        if lora:
            assert trained.trainable == adapters > 0
            assert trained.flops_per_token == full - 2 * parts.params + 6 * adapters
        else:
            assert trained.trainable == trained.total and adapters == 0
            assert trained.flops_per_token == full
        assert parts.settings.flops_per_token == trained.flops_per_token
    fields = {"trainable_params": adapters, "total_params": trained.total} if lora else {}
    assert trained_fields(trained) == fields


def test_a_lora_run_shows_its_trainable_parameters_of_all(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lora = {"params": 430_000, "trainable_params": 7_168, "total_params": 442_368}
    out = printed(capsys, monkeypatch, **lora)
    assert "llama_tiny (0.43M parameters; 7,168 of 442,368 trainable, 1.62%)" in out
    assert "trainable" not in printed(capsys, monkeypatch)
