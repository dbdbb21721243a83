"""The planner: enumerate valid splits, predict memory and time, reject what does not fit,
rank the rest by predicted throughput; optionally confirm the top few with a smoke run.

Rules that matter at scale are enforced, not just preferred: tensor parallel stays inside a
node, pipeline stages hold equal numbers of layers, and every candidate keeps the configured
global batch (and so the number of steps), so a plan never silently changes convergence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xirang.planning import (
    MICRO_BATCHES,
    ClusterShape,
    ModelShape,
    ParallelPlan,
    PlanChoice,
    PlanError,
    candidate_plans,
)
from xirang_planner.calibrate import HostProfile, measure_host
from xirang_planner.memory import MemoryEstimate, predict_memory
from xirang_planner.runtime_memory import RuntimeMemory, cached_runtime, with_runtime
from xirang_planner.timing import TimeEstimate, predict_time


@dataclass(frozen=True)
class Candidate:
    plan: ParallelPlan
    memory: MemoryEstimate
    time: TimeEstimate
    tokens_per_s: float

    def row(self) -> dict[str, Any]:
        return {
            "plan": self.plan.label(),
            "parallel": self.plan.settings(),
            "micro_batch": self.plan.micro_batch,
            "memory_bytes": self.memory.as_dict(),
            "step_s": self.time.as_dict(),
            "tokens_per_s": round(self.tokens_per_s, 1),
        }


@dataclass
class Ranking:
    """Fitting candidates, fastest first, and why the others were turned down."""

    candidates: list[Candidate]
    rejected: list[tuple[ParallelPlan, str]] = field(default_factory=list)

    @property
    def best(self) -> Candidate:
        return self.candidates[0]


class DefaultPlanner:
    """``parallel.planner=default``: the plans :func:`rank_plans` ranks for the run's workers
    on this host, timed on the host as measured when its workers share its cores (CPU workers:
    a peak FLOP rate alone mispredicts them), each charged the runtime memory a worker holds
    beyond its tensors (measured once per host and cached)."""

    def choose(
        self, config: dict[str, Any], shape: ModelShape, cluster: ClusterShape
    ) -> PlanChoice:
        trainer = config["trainer"]
        workers, global_batch = trainer["nproc"], trainer["global_batch"]
        host = measure_host(config, workers, list(MICRO_BATCHES)) if cluster.shared else None
        runtime = cached_runtime(config, workers)
        ranking = rank_plans(shape, cluster, global_batch, workers, host, runtime=runtime)
        plans = tuple(c.plan for c in ranking.candidates)
        return PlanChoice(plans[0], plans)


def rank_plans(
    shape: ModelShape,
    cluster: ClusterShape,
    global_batch: int,
    devices: int | None = None,
    host: HostProfile | None = None,
    optimizer: str = "adamw",
    runtime: RuntimeMemory | None = None,
    tp: int | None = None,
) -> Ranking:
    """Every valid split of ``devices`` (default: the whole cluster), ranked; times on ``host``
    as measured when given (this machine), else on the described ``cluster``; each worker's
    ``runtime`` beyond tensors charged to its memory when measured (this machine). ``tp``
    keeps only the splits of that tensor-parallel degree."""
    world = devices or cluster.devices
    fitting, rejected = [], []
    for plan in candidate_plans(world, shape, global_batch):
        if tp is not None and plan.tp != tp:
            continue
        why = _rule_broken(plan, shape, cluster)
        memory = predict_memory(shape, plan, global_batch, optimizer, cluster.dtype_bytes)
        memory = with_runtime(memory, runtime, plan, shape, global_batch)
        if not why and memory.total > cluster.memory_bytes:
            why = f"needs {_gib(memory.total)} per device, has {_gib(cluster.memory_bytes)}"
        if why:
            rejected.append((plan, why))
            continue
        time = predict_time(shape, plan, global_batch, cluster, host)
        tokens = global_batch * shape.seq_len / time.total
        fitting.append(Candidate(plan, memory, time, tokens))
    if not fitting:
        leanest = leanest_need(shape, cluster, global_batch, world, optimizer, runtime)
        raise PlanError(_fits_nowhere(leanest, cluster, global_batch, world))
    fitting.sort(key=lambda c: (-c.tokens_per_s, c.memory.total))
    return Ranking(fitting, rejected)


def _rule_broken(plan: ParallelPlan, shape: ModelShape, cluster: ClusterShape) -> str:
    if plan.tp > cluster.devices_per_node:
        return f"tp={plan.tp} would cross nodes of {cluster.devices_per_node} devices"
    if shape.layers % plan.pp:
        return f"pp={plan.pp} leaves stages unbalanced over {shape.layers} layers"
    return ""


def _fits_nowhere(
    leanest: tuple[ParallelPlan | None, int], cluster: ClusterShape, global_batch: int, world: int
) -> str:
    """Why no split fits: no valid split at all, or the leanest one's need (``leanest``, from
    :func:`leanest_need`) against the devices' memory."""
    least, need = leanest
    if least is None:
        return f"no valid split of {world} devices for this model and global batch {global_batch}"
    more = -(-need // cluster.memory_bytes)
    return (
        f"the model fits nowhere on {world} x {_gib(cluster.memory_bytes)}: the leanest plan "
        f"({least.label()}) needs {_gib(need)} per device. Use devices with more memory, more "
        f"devices (about {more}x the memory), or a smaller model/sequence/micro-batch."
    )


def leanest_need(
    shape: ModelShape,
    cluster: ClusterShape,
    global_batch: int,
    world: int,
    optimizer: str,
    runtime: RuntimeMemory | None,
) -> tuple[ParallelPlan | None, int]:
    """The valid split of ``world`` devices that needs the least memory per device, and that
    memory (None and 0 when no split is valid)."""
    plans = candidate_plans(world, shape, global_batch)
    if not plans:
        return None, 0

    def need_of(plan: ParallelPlan) -> int:
        memory = predict_memory(shape, plan, global_batch, optimizer, cluster.dtype_bytes)
        return with_runtime(memory, runtime, plan, shape, global_batch).total

    least = min(plans, key=need_of)
    return least, need_of(least)


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.2f} GiB" if nbytes >= 2**28 else f"{nbytes / 2**20:.1f} MiB"
