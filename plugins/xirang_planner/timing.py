"""Step time of a plan: compute, the collectives the plan's strategy issues, the pipeline bubble.

Two forms share one count of the collectives (:func:`collectives`: which operation, how many
bytes, over which group, how often):

- a described cluster (dedicated devices): compute from model FLOPs over the device's sustained
  rate, ring collectives (:mod:`xirang_core.comm.cost_model`, nccl-tests' bus bandwidth) on the
  link each group uses, and the bubble ``(p - 1) / m`` of the compute;
- this host, measured (:class:`~xirang_planner.calibrate.HostProfile`): compute from the
  model's own layer timed per micro-batch size (its fixed per-operation cost does not shrink
  with tensor parallel), collectives on the links measured for each group size, and the step
  simulated on workers that share the host's cores (:mod:`xirang_planner.simulate`).

Communication is counted as exposed (not hidden behind compute): on the CPU/gloo path it is,
and elsewhere this keeps the ranking conservative for the communication-heavy plans.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from xirang.planning import (
    Cluster,
    Link,
    ModelShape,
    ParallelPlan,
    ring_time,
    stage_params,
)

if TYPE_CHECKING:
    from xirang_planner.calibrate import HostProfile, StageCost

#: DDP's default gradient bucket (bytes): one all-reduce per bucket
DDP_BUCKET = 25 * 2**20
#: when a collective runs: in each micro-batch's forward or backward, or once per step
PHASES = ("forward", "backward", "step")


@dataclass(frozen=True)
class TimeEstimate:
    compute: float  # seconds of arithmetic per step on the busiest device
    bubble: float  # pipeline fill and drain (idle waiting for other stages)
    comm: float  # exposed collective time per step

    @property
    def total(self) -> float:
        return self.compute + self.bubble + self.comm

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "total": self.total}


@dataclass(frozen=True)
class Collective:
    """``calls`` calls of ``op`` on ``nbytes`` over ``group`` ranks spaced ``stride`` apart, per
    micro-batch (forward/backward phases) or per step."""

    op: str  # all_reduce | all_gather | reduce_scatter | p2p
    nbytes: float
    group: int
    stride: int
    calls: float
    phase: str
    #: the data-parallel wrapper that issues it ("fsdp" or "ddp"; "" for the others)
    wrapper: str = ""


def flops_per_token(shape: ModelShape) -> float:
    """Training FLOPs per token, 6N + 12·L·h·s (PaLM, appendix B)."""
    return 6 * shape.params + 12 * shape.layers * shape.hidden * shape.seq_len


def predict_time(
    shape: ModelShape,
    plan: ParallelPlan,
    global_batch: int,
    cluster: Cluster,
    host: HostProfile | None = None,
) -> TimeEstimate:
    """The step time of ``plan``: on ``host`` as measured when given, else on ``cluster``."""
    if host is not None:
        return _host_time(shape, plan, global_batch, host)
    return _cluster_time(shape, plan, global_batch, cluster)


def collectives(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, dtype_bytes: int
) -> list[Collective]:
    """What the busiest stage's worker sends per micro-batch and per step."""
    layers = _busiest_layers(shape, plan)
    act = plan.micro_batch * shape.seq_len * shape.hidden * dtype_bytes
    found = _tp_collectives(plan, layers, act) + _dp_collectives(shape, plan, dtype_bytes)
    if plan.pp > 1:
        stride = plan.dp * plan.tp
        found += [Collective("p2p", act, 2, stride, 1, "forward")]
        found += [Collective("p2p", act, 2, stride, 1, "backward")]
        if shape.tied_embeddings:  # first and last stage sum the tied weight's gradient
            embed = shape.vocab * shape.hidden * dtype_bytes / plan.tp
            found += [Collective("all_reduce", embed, 2, stride * (plan.pp - 1), 1, "step")]
    return found


def _tp_collectives(plan: ParallelPlan, layers: int, act: float) -> list[Collective]:
    """Per layer and micro-batch: the attention and MLP outputs are all-reduced in forward and
    their inputs' gradients in backward (Megatron), or under sequence parallel each becomes an
    all-gather before and a reduce-scatter after; full recompute repeats the forward ones."""
    if plan.tp == 1:
        return []
    redo = 2 if plan.recompute == "full" else 1
    if plan.sp:
        ops = [("all_gather", 2 * layers), ("reduce_scatter", 2 * layers)]
    else:
        ops = [("all_reduce", 2 * layers)]
    return [
        Collective(op, act, plan.tp, 1, calls * (redo if phase == "backward" else 1), phase)
        for op, calls in ops
        for phase in ("forward", "backward")
    ]


def _dp_collectives(shape: ModelShape, plan: ParallelPlan, dtype_bytes: int) -> list[Collective]:
    """Gradient (and, sharded, parameter) traffic over the data-parallel group.

    zero 0: DDP all-reduces its buckets once per step. FSDP, per unit (each layer and the
    root): zero 3 gathers parameters in forward and again in backward and reduce-scatters
    gradients in every backward; zero 2 gathers once per micro-batch; zero 1 gathers and
    reduces once per step. Under a pipeline the stage defers gradient reduction and resharding
    after backward to the step's last backward, as torch's PipelineStage does: zero 3 then
    re-gathers in each backward only (the next forward finds the parameters gathered)."""
    if plan.dp == 1:
        return []
    stage = max(range(plan.pp), key=lambda s: stage_params(shape, plan, s).total)
    nbytes = stage_params(shape, plan, stage).total * dtype_bytes
    if plan.zero == 0:
        buckets = max(1, math.ceil(nbytes / DDP_BUCKET))
        bucket = nbytes / buckets
        return [Collective("all_reduce", bucket, plan.dp, plan.tp, buckets, "step", "ddp")]
    units = _fsdp_units(shape, plan)
    unit = nbytes / units

    def ring(op: str, phase: str) -> Collective:
        return Collective(op, unit, plan.dp, plan.tp, units, phase, "fsdp")

    if plan.zero == 3:  # a stage keeps what its backward gathered for the next forward
        first = "forward" if plan.pp == 1 else "step"
        gathers = [ring("all_gather", first), ring("all_gather", "backward")]
    elif plan.zero == 2 and plan.pp == 1:
        gathers = [ring("all_gather", "forward")]
    else:
        gathers = [ring("all_gather", "step")]
    per_micro = plan.zero >= 2 and plan.pp == 1
    return [*gathers, ring("reduce_scatter", "backward" if per_micro else "step")]


def _fsdp_units(shape: ModelShape, plan: ParallelPlan) -> int:
    """FSDP units of the stage with the most parameters: each layer and the root."""
    stage = max(range(plan.pp), key=lambda s: stage_params(shape, plan, s).total)
    return plan.layer_counts(shape.layers)[stage] + 1


def _busiest_layers(shape: ModelShape, plan: ParallelPlan) -> int:
    return max(plan.layer_counts(shape.layers))


# --- a described cluster --------------------------------------------------------------------


def _cluster_time(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, cluster: Cluster
) -> TimeEstimate:
    flops = flops_per_token(shape) * global_batch * shape.seq_len
    if plan.recompute == "full":
        flops *= 4 / 3  # the forward (a third of the work) runs twice
    share = _busiest_layers(shape, plan) / shape.layers  # the slowest stage sets the pace
    compute = flops * share / (plan.dp * plan.tp) / (cluster.tflops * 1e12)
    m = plan.micro_batches(global_batch)
    bubble = compute * (plan.pp - 1) / m
    comm = 0.0
    for c in collectives(shape, plan, global_batch, cluster.dtype_bytes):
        seconds = c.calls * _op_time(c, _cluster_link(cluster, c.group, c.stride))
        if c.phase == "step":
            comm += seconds
        elif c.op == "p2p":
            comm += seconds * m
        else:  # tensor and sharded-data collectives sit on every micro-batch's path
            tensor = plan.tp > 1 and c.group == plan.tp and c.stride == 1
            comm += seconds * (m + plan.pp - 1 if tensor else m)
    return TimeEstimate(compute=compute, bubble=bubble, comm=comm)


def _cluster_link(cluster: Cluster, group: int, stride: int) -> Link:
    """The link a ring of ``group`` ranks spaced ``stride`` apart runs over."""
    return Link(cluster.latency_us * 1e-6, cluster.link_gbps(group, stride) * 1e9)


def _op_time(c: Collective, link: Link) -> float:
    if c.op == "p2p":
        return c.nbytes / link.bandwidth_bps + link.latency_s
    return ring_time(c.op, c.nbytes, c.group, link)


# --- this host, measured --------------------------------------------------------------------


def _host_time(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, host: HostProfile
) -> TimeEstimate:
    """Simulated step on the measured host; compute is the busiest stage's work at the speed
    it gets while every worker computes, the bubble what the simulation adds beyond compute
    and the micro-batches' own collectives."""
    from xirang_planner.simulate import StageWork, simulate_step

    m = plan.micro_batches(global_batch)
    found = collectives(shape, plan, global_batch, shape.dtype_bytes)
    if (plan.tp, plan.sp) in host.tp_model:  # measured with the split layer's own collectives
        found = [c for c in found if not (c.group == plan.tp and c.stride == 1)]
    waits = {p: _host_wait(found, p, host) for p in PHASES}
    hooks = _wrapper_hooks(shape, plan, host) / 2  # a micro-batch's forward, then backward
    waits["forward"] += hooks
    waits["backward"] += hooks
    work = [
        StageWork(c.forward, c.backward, waits["forward"], waits["backward"])
        for c in (_stage_cost(shape, plan, s, host) for s in range(plan.pp))
    ]
    hop = sum(host.hop_seconds(c.nbytes) for c in found if c.op == "p2p" and c.phase == "forward")
    makespan = simulate_step(work, plan.schedule, m, hop, host.slots, plan.dp * plan.tp)
    slowdown = max(1.0, plan.world / host.slots)
    busiest = max(w.forward + w.backward for w in work)
    optimizer = _optimizer_seconds(shape, plan, host) * slowdown
    compute = m * busiest * slowdown + optimizer
    comm = m * (waits["forward"] + waits["backward"]) + waits["step"]
    bubble = max(0.0, makespan + optimizer - compute - m * (waits["forward"] + waits["backward"]))
    return TimeEstimate(compute=compute, bubble=bubble, comm=comm)


def _stage_cost(shape: ModelShape, plan: ParallelPlan, stage: int, host: HostProfile) -> StageCost:
    """One micro-batch's forward and backward on ``stage``, one worker alone: its layers (a
    tensor-parallel share each; recompute runs the forward again in backward) and, on the last
    stage, the embeddings, head and loss (replicated under tensor parallel)."""
    from xirang_planner.calibrate import StageCost

    layer = host.layer_cost(plan.micro_batch, plan.tp, plan.sp)
    if plan.recompute == "full":
        layer = StageCost(layer.forward, layer.backward + layer.forward)
    cost = layer.scaled(plan.layer_counts(shape.layers)[stage])
    return cost + host.rest_cost(plan.micro_batch) if stage == plan.pp - 1 else cost


def _optimizer_seconds(shape: ModelShape, plan: ParallelPlan, host: HostProfile) -> float:
    """One optimizer step over the parameters this worker updates (its shard under ZeRO)."""
    params = max(stage_params(shape, plan, s).total for s in range(plan.pp))
    shard = plan.dp if plan.zero >= 1 else 1
    return params / shard * host.optimizer_s_per_param


def _host_wait(found: list[Collective], phase: str, host: HostProfile) -> float:
    """Seconds of ``phase``'s collectives on the host's measured links, with what their
    wrapper adds to each call (point-to-point messages are the simulation's hops between
    stages, not waits)."""
    return sum(
        c.calls * (_op_time(c, host.link(c.group)) + _call_overhead(c, host))
        for c in found
        if c.phase == phase and c.op != "p2p"
    )


def _call_overhead(c: Collective, host: HostProfile) -> float:
    """Measured seconds a wrapper spends around one call beyond the ring time: FSDP's copy-in
    and copy-out (a re-gather inside a micro-batch has its own figure), DDP's per-step reducer
    work (counted once, on its first bucket's call)."""
    w = host.wrappers
    if c.wrapper == "fsdp":
        if c.op == "all_gather" and c.phase != "step":
            return w.fsdp_regather_s
        units = max(c.calls, 1.0)  # one call per unit: the layers' and the root's
        return ((units - 1) * w.fsdp_call_s + w.fsdp_root_call_s) / units
    if c.wrapper == "ddp":
        return w.ddp_step_s / max(c.calls, 1.0)
    return 0.0


def _wrapper_hooks(shape: ModelShape, plan: ParallelPlan, host: HostProfile) -> float:
    """Seconds the data-parallel wrapper's hooks add to each micro-batch: FSDP's per unit,
    DDP's once (its root forward and ``no_sync`` bookkeeping)."""
    if plan.dp == 1:
        return 0.0
    if plan.zero == 0:
        return host.wrappers.ddp_micro_s
    w = host.wrappers
    return (_fsdp_units(shape, plan) - 1) * w.fsdp_hook_s + w.fsdp_root_hook_s
