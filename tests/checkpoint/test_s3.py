"""Checkpoints through the S3 tier (``checkpoint.uri=s3://...``) against a real S3 endpoint
(moto_server), including an outage of the origin in the middle of a save."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from xirang_ckpt.cli import listing

from tests.checkpoint.helpers import build, params, train_step
from tests.plugins.xirang_s3.conftest import S3Server, s3_server  # noqa: F401 - the fixture
from xirang_core.checkpoint.manager import CheckpointManager
from xirang_core.checkpoint.snapshot import SaveFailed
from xirang_core.plugins import get_registry
from xirang_core.specs import WorkerContext

pytestmark = pytest.mark.service


def s3_manager(
    tmp_path: Path, uri: str, model: torch.nn.Module, optim: torch.optim.Optimizer
) -> CheckpointManager:
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), str(tmp_path), {})
    config = {
        "checkpoint": {"uri": uri, "interval": 0, "chunk_mb": 0.05, "keep": 5},
        "storage": {"name": "s3", "max_attempts": 1, "retry_mode": "standard"},
        "optim": {},
    }
    return CheckpointManager.from_config(config, ctx, model, optim, registry=get_registry())


def test_save_and_resume_through_s3(tmp_path: Path, s3_server: S3Server) -> None:  # noqa: F811
    uri = f"s3://{s3_server.bucket}/runs/a"
    model, optim = build()
    mgr = s3_manager(tmp_path, uri, model, optim)
    assert type(mgr.store.tier).__name__ == "S3Tier"
    for step in (1, 2):
        train_step(model, optim, step)
        mgr.save(step)
        mgr.wait(raise_errors=True)
    fresh, fresh_optim = build(seed=4)
    assert s3_manager(tmp_path, uri, fresh, fresh_optim).restore() == 3
    for name, tensor in params(model).items():
        assert torch.equal(tensor, params(fresh)[name]), name
    assert [row["step"] for row in listing(mgr.store)] == [2, 1]


def test_an_origin_outage_fails_the_save_not_the_run(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
) -> None:
    uri = f"s3://{s3_server.bucket}/runs/outage"
    model, optim = build()
    mgr = s3_manager(tmp_path, uri, model, optim)
    train_step(model, optim, 1)
    mgr.save(1)
    mgr.wait(raise_errors=True)
    mgr.store.tier.fs.retries = 1  # s3fs's own retries on top of botocore's
    s3_server.proxy.cut()
    try:
        train_step(model, optim, 2)
        mgr.save(2)
        with pytest.raises(SaveFailed):
            mgr.wait(raise_errors=True)
    finally:
        s3_server.proxy.restore()
    train_step(model, optim, 3)
    mgr.save(3)
    assert mgr.wait(raise_errors=True).step == 3
    assert [row["step"] for row in listing(mgr.store)] == [3, 1]
