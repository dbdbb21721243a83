"""Step time of a plan: compute from model FLOPs over a calibrated rate, collectives from ring
costs over the links the plan's groups use, and the pipeline bubble.

Collective costs are the ring model of :mod:`xirang_core.comm.cost_model` (nccl-tests' bus
bandwidth: all-reduce ``(S/B)·2(n−1)/n + 2(n−1)α``, reduce-scatter and all-gather half that).
Communication is counted as exposed (not hidden behind compute): on the CPU/gloo path it is,
and elsewhere this keeps the ranking conservative for the communication-heavy plans.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from xirang_core.comm.cost_model import Link, ring_time
from xirang_core.parallel.cluster import Cluster
from xirang_core.parallel.memory import stage_layer_count, stage_params
from xirang_core.parallel.plan import ModelShape, ParallelPlan

#: DDP's default gradient bucket (bytes): one all-reduce per bucket
DDP_BUCKET = 25 * 2**20

#: FLOP/s a plan's device reaches; defaults to the cluster's calibrated rate
RateFn = Callable[[ParallelPlan], float]


@dataclass(frozen=True)
class TimeEstimate:
    compute: float  # seconds of arithmetic per step on the busiest device
    bubble: float  # pipeline fill and drain
    comm: float  # exposed collective time per step

    @property
    def total(self) -> float:
        return self.compute + self.bubble + self.comm

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


def flops_per_token(shape: ModelShape) -> float:
    """Training FLOPs per token, 6N + 12·L·h·s (PaLM, appendix B)."""
    return 6 * shape.params + 12 * shape.layers * shape.hidden * shape.seq_len


def predict_time(
    shape: ModelShape,
    plan: ParallelPlan,
    global_batch: int,
    cluster: Cluster,
    rate: RateFn | None = None,
) -> TimeEstimate:
    flops = flops_per_token(shape) * global_batch * shape.seq_len
    if plan.recompute == "full":
        flops *= 4 / 3  # the forward (a third of the work) runs twice
    busiest = max(stage_layer_count(shape.layers, s, plan.pp) for s in range(plan.pp))
    share = busiest / shape.layers  # the slowest stage sets the pipeline's pace
    per_device = flops * share / (plan.dp * plan.tp)
    compute = per_device / (rate(plan) if rate else cluster.tflops * 1e12)
    m = plan.micro_batches(global_batch)
    bubble = compute * (plan.pp - 1) / m
    comm = _tp_comm(shape, plan, cluster) * (m + plan.pp - 1)  # per micro-batch, on the path
    comm += _pp_comm(shape, plan, cluster) * m + _dp_comm(shape, plan, global_batch, cluster)
    return TimeEstimate(compute=compute, bubble=bubble, comm=comm)


def _link(cluster: Cluster, group: int, stride: int) -> Link:
    """The link a ring of ``group`` ranks spaced ``stride`` apart runs over."""
    return Link(cluster.latency_us * 1e-6, cluster.link_gbps(group, stride) * 1e9)


def _tp_comm(shape: ModelShape, plan: ParallelPlan, cluster: Cluster) -> float:
    """Per micro-batch on one stage: 4 all-reduces of b·s·h per layer (2 forward, 2 backward),
    as all-gather + reduce-scatter pairs under sequence parallel (same volume); recompute
    repeats the forward two."""
    if plan.tp == 1:
        return 0.0
    layers = max(stage_layer_count(shape.layers, s, plan.pp) for s in range(plan.pp))
    nbytes = plan.micro_batch * shape.seq_len * shape.hidden * cluster.dtype_bytes
    per = ring_time("all_reduce", nbytes, plan.tp, _link(cluster, plan.tp, 1))
    count = 6 if plan.recompute == "full" else 4
    return layers * count * per


def _pp_comm(shape: ModelShape, plan: ParallelPlan, cluster: Cluster) -> float:
    """Per micro-batch: the activation forward and its gradient back across a stage boundary."""
    if plan.pp == 1:
        return 0.0
    nbytes = plan.micro_batch * shape.seq_len * shape.hidden * cluster.dtype_bytes
    link = _link(cluster, plan.pp, plan.dp * plan.tp)
    return 2 * (nbytes / link.bandwidth_bps + link.latency_s)


def _dp_comm(shape: ModelShape, plan: ParallelPlan, global_batch: int, cluster: Cluster) -> float:
    """Gradient (and, sharded, parameter) traffic over the data-parallel group per step.

    zero 0: all-reduce in DDP buckets once per step. FSDP, per layer unit: zero 3 gathers
    parameters in forward and again in backward and reduce-scatters gradients every
    micro-batch (1.5x the traffic); zero 2 gathers once per micro-batch; zero 1 gathers and
    reduces once per step."""
    if plan.dp == 1:
        return 0.0
    stage = max(range(plan.pp), key=lambda s: stage_params(shape, plan, s).total)
    params = stage_params(shape, plan, stage)
    nbytes = params.total * cluster.dtype_bytes
    link = _link(cluster, plan.dp, plan.tp)
    if plan.zero == 0:
        buckets = max(1, math.ceil(nbytes / DDP_BUCKET))
        return buckets * ring_time("all_reduce", nbytes / buckets, plan.dp, link)
    units = stage_layer_count(shape.layers, stage, plan.pp) + 1
    m = plan.micro_batches(global_batch)
    gathers = {1: 1, 2: m, 3: 2 * m}[plan.zero]
    reduces = 1 if plan.zero == 1 else m
    one_pass = units * ring_time("all_gather", nbytes / units, plan.dp, link)
    return (gathers + reduces) * one_pass
