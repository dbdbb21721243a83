"""Step time of a plan: compute, the collectives the plan's strategy issues, the pipeline bubble.

Two forms share one count of the collectives (:func:`collectives`: which operation, how many
bytes, over which group, how often):

- a described cluster (dedicated devices): each stage's micro-batch from its layers' FLOPs
  (and the embeddings on the first stage, the head on the last) over its device's sustained
  rate, plus its tensor-parallel collectives; a step is ``m`` micro-batches of the slowest
  stage and one of each other (fill and drain: the bubble ``(p - 1) / m`` when stages are
  equal). Stages may sit on devices of different types with their own layer counts (the mixed
  planner, :mod:`xirang_planner.mixed`). Collectives are rings
  (:mod:`xirang.comm.cost_model`, nccl-tests' bus bandwidth) on the link each group uses;
- this host, measured (:class:`~xirang_planner.calibrate.HostProfile`): compute from the
  model's own layer timed per micro-batch size (its fixed per-operation cost does not shrink
  with tensor parallel), collectives on the links measured for each group size, and the step
  simulated on workers that share the host's cores (:mod:`xirang_planner.simulate`).

Communication is counted as exposed (not hidden behind compute): on the CPU/gloo path it is,
and elsewhere this keeps the ranking conservative for the communication-heavy plans.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from xirang.planning import ClusterShape, Link, ModelShape, ParallelPlan, ring_time
from xirang_planner.memory import stage_params

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
    cluster: ClusterShape,
    host: HostProfile | None = None,
) -> TimeEstimate:
    """The step time of ``plan``: on ``host`` as measured when given, else on ``cluster``."""
    if host is not None:
        return _host_time(shape, plan, global_batch, host)
    return _cluster_time(shape, plan, global_batch, cluster)


def collectives(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, dtype_bytes: int
) -> list[Collective]:
    """What the busiest stage's worker sends per micro-batch and per step (the measured host's
    model; a described cluster's times each stage's own, :func:`_cluster_time`)."""
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


def _dp_collectives(
    shape: ModelShape, plan: ParallelPlan, dtype_bytes: int, stage: int | None = None
) -> list[Collective]:
    """Gradient (and, sharded, parameter) traffic over the data-parallel group. Parameters
    are gathered in the compute width ``dtype_bytes`` (FSDP2's ``param_dtype``), gradients
    reduced in the states' ``shape.dtype_bytes`` (fp32: the strategies' ``reduce_dtype``, and
    DDP's fp32 gradients under autocast), as measured on the real wrapping
    (:mod:`xirang_planner.verify`).

    zero 0: DDP all-reduces its buckets once per step. FSDP units are each layer and the
    ends (embeddings; final norm and head): zero 3 gathers parameters in forward and again in
    backward, except the head, which is not resharded after forward, and reduce-scatters
    gradients in every backward; zero 2 gathers once per micro-batch; zero 1 gathers and
    reduces once per step. The forward gathers the embedding table twice (its own unit, and
    the head's, a copy of its size or the tied table itself). Under a pipeline the stage
    defers gradient reduction and resharding after backward to the step's last backward, as
    torch's PipelineStage does: zero 3 then re-gathers in each backward only."""
    if plan.dp == 1:
        return []
    if stage is None:  # the stage with the most parameters
        stage = max(range(plan.pp), key=lambda s: stage_params(shape, plan, s).total)
    params = stage_params(shape, plan, stage)
    reduce = shape.dtype_bytes
    if plan.zero == 0:
        nbytes = params.total * reduce
        buckets = max(1, math.ceil(nbytes / DDP_BUCKET))
        bucket = nbytes / buckets
        return [Collective("all_reduce", bucket, plan.dp, plan.tp, buckets, "step", "ddp")]
    count = plan.layer_counts(shape.layers)[stage]
    if plan.pp > 1:
        return _stage_dp_collectives(plan, params, count, dtype_bytes, reduce)
    layer = params.layer
    embed = shape.vocab * shape.hidden / (plan.tp if shape.vocab_parallel else 1)

    def ring(op: str, elements: float, calls: int, phase: str, width: int) -> Collective:
        return Collective(op, elements * width, plan.dp, plan.tp, calls, phase, "fsdp")

    found = [
        ring("all_gather", layer, count, "forward", dtype_bytes),
        ring("all_gather", embed, 2, "forward", dtype_bytes),
    ]
    if plan.zero == 3:
        found += [
            ring("all_gather", layer, count, "backward", dtype_bytes),
            ring("all_gather", embed, 1, "backward", dtype_bytes),
        ]
    phase = "backward" if plan.zero >= 2 else "step"
    if plan.zero == 1:
        found = [replace(c, phase="step") for c in found]
    return [
        *found,
        ring("reduce_scatter", layer, count, phase, reduce),
        ring("reduce_scatter", params.root, 1, phase, reduce),
    ]


def _stage_dp_collectives(
    plan: ParallelPlan, params: Any, count: int, dtype_bytes: int, reduce: int
) -> list[Collective]:
    """A pipeline stage's FSDP traffic, per unit of the stage's average size (each layer and
    the root): gathered once per step and in each backward at zero 3, once per step
    otherwise; reduced once per step (the stage defers it to its last backward)."""
    units = count + 1
    unit = params.total / units

    def ring(op: str, phase: str, width: int) -> Collective:
        return Collective(op, unit * width, plan.dp, plan.tp, units, phase, "fsdp")

    gathers = [ring("all_gather", "step", dtype_bytes)]
    if plan.zero == 3:
        gathers.append(ring("all_gather", "backward", dtype_bytes))
    return [*gathers, ring("reduce_scatter", "step", reduce)]


def _fsdp_units(shape: ModelShape, plan: ParallelPlan) -> int:
    """FSDP units of the stage with the most parameters: each layer and the root."""
    stage = max(range(plan.pp), key=lambda s: stage_params(shape, plan, s).total)
    return plan.layer_counts(shape.layers)[stage] + 1


def _busiest_layers(shape: ModelShape, plan: ParallelPlan) -> int:
    return max(plan.layer_counts(shape.layers))


# --- a described cluster --------------------------------------------------------------------


@dataclass(frozen=True)
class StageTime:
    """One micro-batch's forward and backward on a pipeline stage of a described cluster."""

    compute: float  # its layers' arithmetic (and the embeddings on the first, head on the last)
    tensor: float  # its tensor-parallel collectives, on the path of every micro-batch

    @property
    def total(self) -> float:
        return self.compute + self.tensor


def layer_flops(shape: ModelShape) -> float:
    """Training FLOPs per token of one layer: 6 per parameter and attention's 12·h·s."""
    return 6 * shape.layer_size() + 12 * shape.hidden * shape.seq_len


def end_flops(shape: ModelShape) -> tuple[float, float]:
    """Training FLOPs per token outside the layers, (first stage, last stage): the head's
    matmul (6·V·h) on the last, the rest of 6N (embeddings, norms) on the first, so a model's
    stages add up to :func:`flops_per_token`."""
    rest = 6 * max(0, shape.params - shape.layers * shape.layer_size())  # 0: params unknown
    head = min(rest, 6 * shape.vocab * shape.hidden)
    return rest - head, head


def layer_seconds(shape: ModelShape, plan: ParallelPlan, device: ClusterShape) -> StageTime:
    """One layer of one micro-batch on ``device`` (a tensor-parallel share of it): the unit
    of a stage's time, the cost per layer the stage partition balances."""
    flops = layer_flops(shape) * plan.micro_batch * shape.seq_len * _redo(plan)
    act = plan.micro_batch * shape.seq_len * shape.hidden * device.dtype_bytes
    link = _cluster_link(device, plan.tp, 1)
    tensor = sum(c.calls * _op_time(c, link) for c in _tp_collectives(plan, 1, act))
    return StageTime(flops / plan.tp / (device.tflops * 1e12), tensor)


def end_seconds(
    shape: ModelShape, plan: ParallelPlan, device: ClusterShape, first: bool, last: bool
) -> float:
    """Seconds of a micro-batch's embeddings (``first``) and head (``last``) on ``device``,
    replicated under tensor parallel as the strategies run them (a tensor-parallel share
    each, as :func:`flops_per_token` counts them for every plan)."""
    before, after = end_flops(shape)
    flops = (before if first else 0.0) + (after if last else 0.0)
    return flops * plan.micro_batch * shape.seq_len * _redo(plan) / plan.tp / (device.tflops * 1e12)


def stage_seconds(
    shape: ModelShape, plan: ParallelPlan, stage: int, device: ClusterShape
) -> StageTime:
    """One micro-batch on ``stage`` (its own layer count, uneven or balanced) on ``device``."""
    count = plan.layer_counts(shape.layers)[stage]
    layer = layer_seconds(shape, plan, device)
    ends = end_seconds(shape, plan, device, stage == 0, stage == plan.pp - 1)
    return StageTime(count * layer.compute + ends, count * layer.tensor)


def _redo(plan: ParallelPlan) -> float:
    """Full recompute runs each forward (a third of the work) twice."""
    return 4 / 3 if plan.recompute == "full" else 1.0


def _cluster_time(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, cluster: ClusterShape
) -> TimeEstimate:
    """A step with every stage on ``cluster``'s devices."""
    return pipeline_time(shape, plan, global_batch, [cluster] * plan.pp)


def pipeline_time(
    shape: ModelShape,
    plan: ParallelPlan,
    global_batch: int,
    devices: Sequence[ClusterShape],
    cross: Link | None = None,
) -> TimeEstimate:
    """A step on dedicated devices, stage ``s`` on ``devices[s]`` (a type of its own in a
    mixed cluster), its layers ``plan.layer_counts``. 1F1B over ``m`` micro-batches takes
    ``m`` times the slowest stage's micro-batch and each other stage's once (fill and drain):
    with equal stages the ``(p - 1) / m`` bubble. Stages of different types talk over
    ``cross``."""
    m = plan.micro_batches(global_batch)
    times = [stage_seconds(shape, plan, s, d) for s, d in enumerate(devices)]
    slowest = max(range(plan.pp), key=lambda s: times[s].total)
    others = [t for s, t in enumerate(times) if s != slowest]
    compute = m * times[slowest].compute
    bubble = sum(t.compute for t in others)
    comm = m * times[slowest].tensor + sum(t.tensor for t in others)
    comm += max(_dp_seconds(shape, plan, s, d, m) for s, d in enumerate(devices))
    return TimeEstimate(
        compute=compute, bubble=bubble, comm=comm + _pipe_seconds(shape, plan, devices, cross, m)
    )


def _dp_seconds(
    shape: ModelShape, plan: ParallelPlan, stage: int, device: ClusterShape, m: int
) -> float:
    """The data-parallel collectives of ``stage``'s group on its device's links: once per step,
    or on every micro-batch (sharded parameters gathered in forward or backward)."""
    seconds = 0.0
    for c in _dp_collectives(shape, plan, device.dtype_bytes, stage):
        once = c.calls * _op_time(c, _cluster_link(device, c.group, c.stride))
        seconds += once if c.phase == "step" else once * m
    return seconds


def _pipe_seconds(
    shape: ModelShape,
    plan: ParallelPlan,
    devices: Sequence[ClusterShape],
    cross: Link | None,
    m: int,
) -> float:
    """Activations to the next stage and gradients back, each micro-batch, over the slowest
    boundary; the tied embedding's gradient summed once a step between the end stages."""
    if plan.pp == 1:
        return 0.0
    stride = plan.dp * plan.tp
    act = plan.micro_batch * shape.seq_len * shape.hidden * devices[0].dtype_bytes
    hops = [
        _op_time(Collective("p2p", act, 2, stride, 1, "forward"), _between(a, b, stride, cross))
        for a, b in itertools.pairwise(devices)
    ]
    seconds = 2 * m * max(hops)
    if shape.tied_embeddings:
        embed = shape.vocab * shape.hidden * devices[0].dtype_bytes / plan.tp
        ends = stride * (plan.pp - 1)
        tied = Collective("all_reduce", embed, 2, ends, 1, "step")
        seconds += _op_time(tied, _between(devices[0], devices[-1], ends, cross))
    return seconds


def _between(a: ClusterShape, b: ClusterShape, stride: int, cross: Link | None) -> Link:
    """The link between ranks ``stride`` apart on devices ``a`` and ``b``: ``a``'s own when
    they are of one type, else the link between types."""
    if a == b or cross is None:
        return _cluster_link(a, 2, stride)
    return cross


def _cluster_link(cluster: ClusterShape, group: int, stride: int) -> Link:
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
    action = host.pipeline_action_s if plan.pp > 1 else 0.0  # the schedule's own work
    work = [
        StageWork(c.forward + action, c.backward + action, waits["forward"], waits["backward"])
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
