"""The loop's features: optimizer kernels, optim.name at compose, eval_every, the non-finite
guard (stop and skip), and the figures each metrics record carries."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.conftest import QUICK, run_dirs
from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.train.loop import NonFiniteError
from xirang_core.train.optim import implementation


def test_an_unknown_optimizer_is_refused_when_the_config_is_composed() -> None:
    with pytest.raises(ConfigError, match=r"optim.name='lion'.*adamw, sgd"):
        compose(["optim.name=lion"])


FUSED = {"fused": True, "foreach": False}
FOREACH = {"fused": False, "foreach": True}
LOOP = {"fused": False, "foreach": False}


def test_plain_parameters_take_fused_kernels_and_fsdp_shards_foreach() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    assert implementation([torch.nn.Parameter(torch.ones(4))]) == FUSED
    plain = torch.nn.Parameter(torch.ones(4))
    assert implementation([torch.nn.Parameter(torch.ones(4, device="meta"))]) == LOOP
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        shard = torch.nn.Parameter(distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]))
        assert implementation([shard]) == FOREACH
        assert implementation([shard, plain]) == LOOP  # tensor parallel's mix
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
    with pytest.raises(NonFiniteError, match=r"^step 3: non-finite loss nan.*step 1$"):
        trainer.train_step(3)


def test_grad_norm_is_measured_without_clipping(make_trainer: Callable) -> None:
    trainer = make_trainer(grad_clip=0.0)
    trainer.train_step(1)
    assert float(trainer.grad_norm) > 0


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
    assert "latest checkpoint: step 1; resume with checkpoint.resume=" in line
    assert "Traceback" not in result.stderr
