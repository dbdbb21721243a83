"""The loop's features: optimizer kernels, optim.name at compose, eval_every, the non-finite
guard (stop and skip), and the figures each metrics record carries."""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.conftest import QUICK, run_dirs
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry
from xirang_core.train import report
from xirang_core.train.loop import NonFiniteError
from xirang_core.train.optim import build_optimizer, implementation, kernels


def test_an_unknown_optimizer_is_refused_when_the_config_is_composed() -> None:
    with pytest.raises(ConfigError, match=r"optim.name='lion'.*adamw, sgd"):
        compose(["optim.name=lion"])


FUSED = {"fused": True, "foreach": False}
FOREACH = {"fused": False, "foreach": True}
ADAMW = {"name": "adamw", "lr": 0.1, "beta1": 0.9, "beta2": 0.95, "weight_decay": 0.1}


LOOP = {"fused": False, "foreach": False}


@pytest.mark.parametrize(
    ("devices", "chosen"),
    [({"cpu"}, FUSED), ({"cuda"}, FUSED), ({"npu"}, FOREACH), ({"cuda", "meta"}, FOREACH)],
)
def test_the_optimizer_fuses_where_the_device_has_fused_kernels(
    devices: set[str], chosen: dict
) -> None:
    """Fused AdamW on CUDA (and the CPU), batched foreach ops elsewhere."""
    assert kernels(devices) == chosen


def test_fsdp_shards_take_fused_kernels_and_train_like_plain_tensors() -> None:
    """FSDP2's DTensor shards get the fused AdamW (foreach before), with the single-process
    update; plain tensors beside DTensors (tensor parallel) keep the loop."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    plain = torch.nn.Parameter(torch.ones(4))
    assert implementation([plain]) == FUSED
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        model, reference = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        reference.load_state_dict(model.state_dict())
        for name, param in list(model.named_parameters()):
            shard = distribute_tensor(param.detach(), mesh, [Shard(0)])
            setattr(model, name, torch.nn.Parameter(shard))
        assert implementation([model.weight, plain]) == LOOP
        built, single = build_optimizer(model, ADAMW), build_optimizer(reference, ADAMW)
        assert built.defaults["fused"] is True
        x = torch.ones(2, 4)
        for _ in range(3):
            for m, opt in ((model, built), (reference, single)):
                w, b = (t.full_tensor() if hasattr(t, "full_tensor") else t for t in m.parameters())
                (x @ w.T + b).square().sum().backward()
                opt.step()
                opt.zero_grad()
        torch.testing.assert_close(model.weight.full_tensor(), reference.weight)
        torch.testing.assert_close(model.bias.full_tensor(), reference.bias)
    finally:
        dist.destroy_process_group()


def test_the_default_adamw_is_fused_on_the_cpu(make_trainer: Callable) -> None:
    assert make_trainer().optimizer.defaults["fused"] is True


def test_a_checkpoint_of_another_split_keeps_this_runs_kernels(make_trainer: Callable) -> None:
    optimizer = make_trainer().optimizer
    state = optimizer.state_dict()
    for group in state["param_groups"]:  # as an FSDP run saved them
        group.update(FOREACH)
    optimizer.load_state_dict(state)
    assert all(g["fused"] and not g["foreach"] for g in optimizer.param_groups)


def test_skip_drops_a_non_finite_step_and_counts_it(make_trainer: Callable) -> None:
    trainer = make_trainer(nonfinite="skip")
    trainer.train_step(1)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    forward = trainer.model.forward
    trainer.model.forward = lambda x, y: forward(x, y) * float("inf")
    trainer.train_step(2)
    assert trainer.skipped_steps == 1
    assert all(torch.equal(p, q) for p, q in zip(before, trainer.model.parameters(), strict=True))
    assert all(p.grad is None for p in trainer.model.parameters())
    trainer.model.forward = forward
    trainer.train_step(3)
    assert trainer.skipped_steps == 1  # training goes on
    assert not torch.equal(before[0], next(trainer.model.parameters()))


def test_stop_names_the_step_and_the_checkpoint(make_trainer: Callable) -> None:
    trainer = make_trainer()
    trainer.recovery = lambda: "latest checkpoint: step 1"
    forward = trainer.model.forward
    trainer.model.forward = lambda x, y: forward(x, y) * float("nan")
    with pytest.raises(NonFiniteError, match=r"^step 3: non-finite loss.*step 1$"):
        trainer.train_step(3)
        trainer.settle(3)


def test_a_non_finite_loss_between_log_steps_is_caught_and_never_applied(
    make_trainer: Callable,
) -> None:
    """The guard reads the device only at log steps: a NaN loss at step 3 of a run logging
    every 10 stops it at its last step, naming step 3; step 3's update was not applied."""
    trainer = make_trainer(max_steps=5, log_every=10)
    trainer.hook = get_registry().hook
    forward, calls, weights = trainer.model.forward, [0], {}

    def nan_at_step_3(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        calls[0] += 1  # two micro-batches a step
        loss = forward(x, y)
        return loss * float("nan") if calls[0] in (5, 6) else loss

    def keep(step: int) -> None:
        weights[step] = [p.detach().clone() for p in trainer.model.parameters()]

    trainer.model.forward = nan_at_step_3
    with pytest.raises(NonFiniteError, match=r"^step 3: non-finite .*checked at step 5"):
        trainer.fit(on_step_end=keep)
    assert all(torch.equal(a, b) for a, b in zip(weights[2], weights[3], strict=True))
    assert not torch.equal(weights[3][0], weights[4][0])  # the steps after it trained


def test_grad_norm_is_measured_without_clipping(make_trainer: Callable) -> None:
    trainer = make_trainer(grad_clip=0.0)
    trainer.train_step(1)
    assert float(trainer.grad_norm) > 0


def test_the_last_record_and_progress_line_hold_the_final_evaluation(
    make_trainer: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 53: with ``trainer.eval_every=10 trainer.max_steps=30`` the last evaluation was
    in summary.json but not in metrics.jsonl's step-30 record, and the last progress line
    showed step 20's. Every evaluation is scored once: the worker reuses the last one."""
    trainer = make_trainer(max_steps=6, eval_every=4, log_every=3)
    scores = iter([4.75, 4.5])
    trainer.evaluate = lambda: next(scores)
    trainer.metrics, trainer.hook = report.MetricsLog(tmp_path), get_registry().hook
    trainer.fit()
    records = report.read_metrics(tmp_path)
    assert {r["step"]: r.get("val_loss") for r in records} == {1: None, 3: None, 4: 4.75, 6: 4.5}
    assert trainer.evaluated == (6, 4.5)  # what the summary reports, not scored again
    printed = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step ")]
    assert printed[-1].startswith("step 6 loss ") and " eval_loss 4.5000 " in printed[-1]


@pytest.mark.slow
def test_records_carry_lr_grad_norm_memory_and_periodic_val_loss(
    run_xirang: Callable, tmp_path: Path
) -> None:
    result = run_xirang(*QUICK, "device=cpu", "trainer.eval_every=3", "trainer.log_every=4")
    assert result.returncode == 0, result.stderr[-2000:]
    run_dir = run_dirs(tmp_path)[-1]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 3, 4, 6]  # log steps plus the eval step 3
    for record in records:
        assert {"lr", "grad_norm", "mem_bytes", "loss", "tokens_per_s"} <= record.keys()
        assert record["grad_norm"] > 0 and record["mem_bytes"] > 2**20
    assert "val_loss" in records[1] and "val_loss" not in records[2]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert records[3]["val_loss"] == summary["val_loss"]  # the final evaluation, logged
    assert summary["skipped_steps"] == 0 and summary["compile_s"] == 0


@pytest.mark.slow
def test_a_diverging_run_stops_with_one_line_naming_step_and_checkpoint(
    run_xirang: Callable,
) -> None:
    result = run_xirang(
        *QUICK, "device=cpu", "optim.lr=1e30", "optim.warmup_steps=0", "checkpoint.interval=1"
    )
    assert result.returncode == 1
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("xirang error: step 2: non-finite "), result.stderr[-2000:]
    # the checkpoint of step 2 holds step 1's weights: step 2's update was not applied
    assert re.search(r"latest checkpoint: step [12]; resume with checkpoint.resume=", line)
    assert "Traceback" not in result.stderr


def test_the_collector_runs_every_n_steps_only_and_comes_back_after(
    make_trainer: Callable,
) -> None:
    """torchtitan's policy: automatic collection off while training, generation-1
    collections at the start and every ``gc_every`` steps, the collector on again after."""
    trainer = make_trainer(max_steps=5, gc_every=2, log_every=10)
    trainer.hook = get_registry().hook  # the observers a run's step records go to
    steps = [0]  # the last step that ended
    collected: list[tuple[int, int]] = []  # (last step ended, generation) while disabled
    automatic_during_steps: list[int] = []

    def on_collect(phase: str, info: dict) -> None:
        if phase == "start" and not gc.isenabled():
            collected.append((steps[0], info["generation"]))

    def on_step_end(step: int) -> None:
        steps[0] = step
        if gc.isenabled():
            automatic_during_steps.append(step)

    gc.callbacks.append(on_collect)
    try:
        trainer.fit(on_step_end=on_step_end)
    finally:
        gc.callbacks.remove(on_collect)
    assert gc.isenabled()
    assert automatic_during_steps == []
    assert collected == [(0, 1), (2, 1), (4, 1)]


def test_a_step_above_the_measured_peak_is_said_once_and_no_step_mfu_passes_100(
    make_trainer: Callable, caplog: pytest.LogCaptureFixture
) -> None:
    """A peak measured under load is beaten by a quiet step: metrics.jsonl, the trackers and
    Prometheus then read MFU against what the run reached, never above 100%, and the first
    such record (and the log) says why."""
    trainer = make_trainer(flops_per_token=1e6, peak_flops=1.0)  # 1 FLOP/s: any step beats it
    with caplog.at_level("WARNING", logger="xirang.train"):
        records = [trainer._record(step, torch.tensor(2.0), 0.5, 1, 1.0) for step in (1, 2, 3)]
    assert records[0]["mfu"] == 1.0
    assert all(0 < r["mfu"] <= 1.0 for r in records)
    assert "measured low" in records[0]["mfu_note"]
    assert all("mfu_note" not in r for r in records[1:])
    assert sum("measured low" in m for m in caplog.messages) == 1
