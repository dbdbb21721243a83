"""parallel=accelerate: DDP through Accelerator trains like one process; FSDP on CPU is refused."""

from __future__ import annotations

from typing import Any

import pytest

from xirang.planning.smoke import plan_config, run_configs
from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import ParallelPlan
from xirang_core.plugins import get_registry

pytest.importorskip("accelerate")  # a dev dependency: present in CI


def test_listed_and_available() -> None:
    spec = get_registry().spec("parallel", "accelerate")
    assert spec.missing() == []
    assert "xirang[accelerate]" in spec.install


@pytest.mark.slow
def test_ddp_through_accelerate_matches_one_process(tiny_config: dict[str, Any]) -> None:
    single = plan_config(tiny_config, ParallelPlan(micro_batch=4))
    accelerated = {
        **plan_config(tiny_config, ParallelPlan(dp=2, micro_batch=2)),
        "parallel": {"name": "accelerate", "mode": "ddp", "reshard_after_forward": True},
    }
    (reference,) = run_configs([single], 1, 5)[0]
    ranks = run_configs([accelerated], 2, 5)
    losses = ranks[0][0]["losses"]
    assert max(abs(a - b) / b for a, b in zip(losses, reference["losses"], strict=True)) < 1e-4


def test_fsdp_mode_without_accelerators_is_refused() -> None:
    import torch

    from xirang_core.specs import WorkerContext

    strategy = get_registry().create(
        "parallel", {"name": "accelerate", "mode": "fsdp", "reshard_after_forward": True}
    )
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), "", {})
    with pytest.raises(ConfigError, match="not FSDP"):
        strategy.wrap(torch.nn.Linear(2, 2), ctx)
