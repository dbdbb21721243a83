"""A real pool service (the pool's own engine, store and tokens) on a small cluster."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore

CLUSTER = """
groups:
  - {type: a100, nodes: 4, devices: 8, nodes_per_leaf: 2}
  - {type: v100, nodes: 2, devices: 8}
throughputs:
  reference: a100
  speed: {a100: 1.0, v100: 0.6}
projects:
  - {name: nlp, guaranteed: 16, team: research}
  - {name: vision, guaranteed: 8, team: product}
"""
OPERATOR_TOKEN = "operator-secret-token"


class Clock:
    """Time the test moves by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Pool:
    service: PoolService
    state: Path
    tokens: dict[str, str]
    clock: Clock


def make_pool(folder: Path, now: float = 1_700_000_000.0) -> Pool:
    """nlp runs three 8-card jobs (one borrowed), vision waits; one v100 node is drained."""
    (folder / "cluster.yaml").write_text(CLUSTER)
    clock = Clock(now)
    state = folder / "pool.db"
    service = PoolService(
        PoolStore(state), folder / "cluster.yaml", "priority", OPERATOR_TOKEN, clock=clock
    )
    rotate = {"rotate_token": True}
    tokens = {p: service.set_quota(OPERATOR, p, rotate)["token"] for p in ("nlp", "vision")}
    for i in range(3):
        service.submit(OPERATOR, {"project": "nlp", "cards": 8, "name": f"nlp-train-{i}"})
    service.submit(OPERATOR, {"project": "vision", "cards": 32, "name": "vision-big"})
    service.drain(OPERATOR, "v100-0001", "ECC errors on GPU 3")
    return Pool(service, state, tokens, clock)
