"""The planner over a mixed cluster (devices of several types): pipelines whose stages sit on
different device types with uneven layer counts, and data parallelism across pipelines of
different speeds with batch shares in proportion.

The unit of placement is a tensor-parallel group: ``tp`` devices of one type inside one node
(tensor parallelism across types cannot run: NCCL, RCCL and HCCL do not reach each other, and
their per-layer collectives would cross the slowest link). A *pipeline kind* is a chain of such
groups, the groups of each type together, replicated ``dp`` times; each stage's layers come from
:func:`~xirang_planner.partition.partition` (the slowest stage as fast as each stage's memory
lets it be), with the per-layer and per-stage times of the uniform planner's time model
(:mod:`xirang_planner.timing`) and its memory model. A plan is one or more pipeline kinds, the
device types shared out among them; each kind takes a share of the step's micro-batches so
that the kinds finish together, and kinds exchange gradients through the host-staged link
between types (two levels: inside a kind over its own links, then between kinds).

Searched: every subset of the types, every way to group it into pipeline kinds, the order of
types along each pipeline, ``dp`` of each kind, and ``tp``, recompute and micro-batch (``sp``
with ``tp > 1``, DDP over whole stages and ZeRO-1 over tensor-parallel shards, 1F1B: the
leanest and fastest the time model knows for a pipeline; every pipeline passes the checks the
strategies apply, :func:`~xirang_core.parallel.plan.plan_problem`). A plan with a single
pipeline kind runs as one xirang run (``parallel=hybrid`` with ``parallel.stage_layers``, ranks
placed stage by stage); several kinds need balanced data parallelism across pipelines of
different shapes, which the planner predicts but the runtime does not run yet.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce

from xirang.planning import (
    MICRO_BATCHES,
    ClusterShape,
    Link,
    ModelShape,
    ParallelPlan,
    PlanError,
    plan_problem,
    ring_time,
)
from xirang_planner.clusters import MixedCluster
from xirang_planner.memory import stage_memory, stage_params
from xirang_planner.partition import Slot, partition
from xirang_planner.timing import (
    TimeEstimate,
    end_seconds,
    layer_flops,
    layer_seconds,
    pipeline_time,
)

RECOMPUTE = ("none", "full")
OPTIMIZER = "adamw"


@dataclass(frozen=True)
class Options:
    """What every pipeline kind of one plan shares."""

    tp: int
    micro_batch: int
    recompute: str

    def plan(self, dp: int, pp: int, stage_layers: tuple[int, ...] = ()) -> ParallelPlan:
        """A pipeline kind's plan: sequence parallel with tensor parallel (leaner, as fast),
        DDP over whole stages, ZeRO-1 over tensor-parallel shards (the strategies' rule)."""
        return ParallelPlan(
            dp=dp,
            tp=self.tp,
            pp=pp,
            sp=self.tp > 1,
            zero=1 if dp > 1 and self.tp > 1 else 0,
            micro_batch=self.micro_batch,
            recompute=self.recompute,
            schedule="1f1b",
            stage_layers=stage_layers if pp > 1 else (),
        )


@dataclass(frozen=True)
class Pipeline:
    """One pipeline kind: stage ``s`` on device group ``groups[s]`` (an index into the mixed
    cluster's groups) with ``plan.layer_counts`` layers, ``plan.dp`` replicas of it."""

    groups: tuple[int, ...]
    plan: ParallelPlan
    memory: tuple[int, ...]  # predicted bytes per device of each stage

    def devices(self, cluster: MixedCluster) -> list[ClusterShape]:
        return [cluster.groups[g] for g in self.groups]

    def time(self, shape: ModelShape, cluster: MixedCluster, micro_batches: int) -> TimeEstimate:
        """Its step with ``micro_batches`` per replica."""
        rows = self.plan.dp * micro_batches * self.plan.micro_batch
        return pipeline_time(shape, self.plan, rows, self.devices(cluster), cross_link(cluster))

    @property
    def least_micro_batches(self) -> int:
        """1F1B keeps every stage busy only with at least one micro-batch per stage."""
        return self.plan.pp


@dataclass(frozen=True)
class Share:
    """A pipeline kind and its share of the step: micro-batches per replica, and its time."""

    pipeline: Pipeline
    micro_batches: int
    time: TimeEstimate

    @property
    def rows(self) -> int:
        return self.pipeline.plan.dp * self.micro_batches * self.pipeline.plan.micro_batch


@dataclass(frozen=True)
class MixedPlan:
    """Pipeline kinds with their shares; ``sync`` is the gradient exchange between kinds."""

    shares: tuple[Share, ...]
    sync: float

    @property
    def step(self) -> float:
        return max(s.time.total for s in self.shares) + self.sync

    @property
    def runnable(self) -> bool:
        """One pipeline kind: one xirang run (``parallel=hybrid`` with ``stage_layers``)."""
        return len(self.shares) == 1

    def groups(self) -> set[int]:
        return {g for s in self.shares for g in s.pipeline.groups}


@dataclass
class Search:
    """The best plans found, and why the rest did not fit."""

    best: MixedPlan | None = None
    #: the best plan on each device group alone (its index)
    alone: dict[int, MixedPlan] = field(default_factory=dict)
    #: the best plan with one pipeline kind over more than one type (runs as one xirang run)
    runnable: MixedPlan | None = None
    tried: int = 0
    fitted: int = 0


def tensor_degrees(shape: ModelShape, cluster: MixedCluster, tp: int | None = None) -> list[int]:
    """The ``tp`` a mixed plan may use: a group of one type inside one node, dividing the heads;
    a ``tp`` that cannot is refused naming those that can."""
    node = reduce(math.gcd, (g.devices_per_node for g in cluster.groups))
    kv = shape.kv_heads or shape.heads
    valid = [
        d
        for d in range(1, node + 1)
        if not (node % d or shape.heads % d or kv % d or shape.seq_len % d)  # sp splits seq
    ]
    if "tp" not in shape.splits:
        valid = [1]
    if tp is not None and tp not in valid:
        nodes = ", ".join(f"{g.devices_per_node} {g.device}" for g in cluster.groups)
        raise PlanError(
            f"tp={tp}: a tensor-parallel group must stay inside one node of one device type "
            f"(tensor parallelism across device types cannot run: their collective libraries "
            f"do not reach each other) and divide the {shape.heads} heads; nodes here hold "
            f"{nodes}. Valid: tp={', '.join(map(str, valid))}"
        )
    return [tp] if tp is not None else valid


def cross_link(cluster: MixedCluster) -> Link:
    return Link(cluster.cross_latency_us * 1e-6, cluster.cross_gbps * 1e9)


def plan_mixed(
    shape: ModelShape, cluster: MixedCluster, global_batch: int, tp: int | None = None
) -> Search:
    """Search every grouping of the cluster's types into pipeline kinds (module docstring);
    the fastest plan, the fastest on each type alone, and the fastest single-kind plan."""
    search = Search()
    builder = Builder(shape, cluster)
    for degree, recompute, mb in itertools.product(
        tensor_degrees(shape, cluster, tp), RECOMPUTE, MICRO_BATCHES
    ):
        if global_batch % mb:
            continue
        options = Options(degree, mb, recompute)
        for layout in layouts(len(cluster.groups)):
            kinds = [builder.candidates(block, options) for block in layout]
            for choice in itertools.product(*kinds):
                search.tried += 1
                found = share_out(shape, cluster, choice, global_batch // mb)
                if found is not None:
                    search.fitted += 1
                    keep(search, found)
    return search


def keep(search: Search, plan: MixedPlan) -> None:
    """Keep ``plan`` where it beats the best so far: overall, alone on its one type, or as
    the best single-kind plan over several types."""
    if search.best is None or plan.step < search.best.step:
        search.best = plan
    used = plan.groups()
    if len(used) == 1:
        group = next(iter(used))
        if group not in search.alone or plan.step < search.alone[group].step:
            search.alone[group] = plan
    elif plan.runnable and (search.runnable is None or plan.step < search.runnable.step):
        search.runnable = plan


def layouts(groups: int) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every set of pipeline kinds over a subset of the groups: each kind a set of groups (its
    types), no group in two kinds, every partition of every non-empty subset."""
    for size in range(1, groups + 1):
        for subset in itertools.combinations(range(groups), size):
            yield from _partitions(list(subset))


def _partitions(items: list[int]) -> Iterator[tuple[tuple[int, ...], ...]]:
    if not items:
        yield ()
        return
    head, rest = items[0], items[1:]
    for tail in _partitions(rest):
        yield ((head,), *tail)
        for i, block in enumerate(tail):
            yield (*tail[:i], (head, *block), *tail[i + 1 :])


class Builder:
    """Pipeline kinds of a block of groups: each order of its types and each ``dp``, with the
    stage partition; cached, since the same kind recurs in many layouts."""

    def __init__(self, shape: ModelShape, cluster: MixedCluster) -> None:
        self.shape, self.cluster = shape, cluster
        self.cache: dict[tuple[tuple[int, ...], Options], list[Pipeline]] = {}

    def candidates(self, block: tuple[int, ...], options: Options) -> list[Pipeline]:
        key = (tuple(sorted(block)), options)
        if key not in self.cache:
            units = [self.cluster.groups[g].devices // options.tp for g in block]
            common = reduce(math.gcd, units)
            found = [
                pipeline
                for dp in _divisors(common)
                for order in itertools.permutations(block)
                if (pipeline := self.build(order, dp, options)) is not None
            ]
            self.cache[key] = found
        return self.cache[key]

    def build(self, order: Sequence[int], dp: int, options: Options) -> Pipeline | None:
        """``dp`` replicas of a pipeline over the groups in ``order``: each group's
        tensor-parallel groups shared among the replicas, one stage each; None when its
        stages cannot hold the model."""
        groups: list[int] = []
        for g in order:
            groups += [g] * (self.cluster.groups[g].devices // options.tp // dp)
        pp = len(groups)
        if pp > self.shape.layers or (pp > 1 and "pp" not in self.shape.splits):
            return None
        base = options.plan(dp, pp)
        slots = [self.slot(base, groups, s) for s in range(pp)]
        counts = partition([layer_flops(self.shape)] * self.shape.layers, slots)
        if counts is None:
            return None
        plan = options.plan(dp, pp, counts)
        if plan_problem(plan, self.shape, _batch(plan)):
            return None  # what the strategies would refuse (plan_problem says why)
        memory = tuple(
            stage_memory(self.shape, plan, _batch(plan), OPTIMIZER, s).total for s in range(pp)
        )
        devices = [self.cluster.groups[g] for g in groups]
        if any(m > d.memory_bytes for m, d in zip(memory, devices, strict=True)):
            return None  # the memory model is not affine in layers after all: never seen
        return Pipeline(tuple(groups), plan, memory)

    def slot(self, base: ParallelPlan, groups: list[int], stage: int) -> Slot:
        """Stage ``stage`` on its group's device: seconds per layer FLOP and per layer, its
        embeddings or head, and the most layers its memory holds."""
        device = self.cluster.groups[groups[stage]]
        flops = layer_flops(self.shape)
        layer = layer_seconds(self.shape, base, device)
        last = stage == base.pp - 1
        fixed = end_seconds(self.shape, base, device, stage == 0, last)
        return Slot(
            rate=layer.compute / flops,
            per_layer=layer.tensor,
            fixed=fixed,
            capacity=self.capacity(base, stage, device),
        )

    def capacity(self, base: ParallelPlan, stage: int, device: ClusterShape) -> int:
        """The most layers ``stage`` holds in ``device``'s memory (:func:`stage_capacity`)."""
        return stage_capacity(self.shape, base, stage, device.memory_bytes)


def stage_capacity(shape: ModelShape, base: ParallelPlan, stage: int, memory: int) -> int:
    """The most layers ``stage`` of ``base`` holds in ``memory`` bytes: its memory is affine
    in its layer count (states and activations per layer, the ends and buffers fixed), so two
    predictions give it."""
    one, two = (_stage_bytes(shape, base, stage, n) for n in (1, 2))
    if one > memory:
        return 0
    per_layer = two - one
    if per_layer <= 0:
        return shape.layers
    return min(shape.layers, 1 + (memory - one) // per_layer)


def _stage_bytes(shape: ModelShape, base: ParallelPlan, stage: int, layers: int) -> int:
    """Bytes per device of ``stage`` holding ``layers`` layers (the others one each)."""
    batch = _batch(base)
    if base.pp == 1:  # one stage holds the whole model: its shape with that many layers
        return stage_memory(replace(shape, layers=layers), base, batch, OPTIMIZER, 0).total
    counts = tuple(layers if s == stage else 1 for s in range(base.pp))
    plan = replace(base, stage_layers=counts)
    return stage_memory(shape, plan, batch, OPTIMIZER, stage).total


def _batch(plan: ParallelPlan) -> int:
    """A step of more micro-batches than stages: the most a 1F1B stage holds in flight."""
    return plan.dp * plan.micro_batch * (plan.pp + 1)


def share_out(
    shape: ModelShape, cluster: MixedCluster, kinds: Sequence[Pipeline], micro_batches: int
) -> MixedPlan | None:
    """Give each pipeline kind micro-batches per replica so that the slowest kind finishes
    first: greedily, one more per replica of the kind that stays fastest with it, from the
    least each needs (1F1B: its stages) until the step's ``micro_batches`` are dealt. A kind's
    step is affine in its micro-batches (the time model's ``m`` times the slowest stage plus
    fill, drain and once-a-step terms). None when they cannot be dealt exactly."""
    counts = [k.least_micro_batches for k in kinds]
    left = micro_batches - sum(k.plan.dp * c for k, c in zip(kinds, counts, strict=True))
    if left < 0:
        return None
    lines = [_affine(shape, cluster, k) for k in kinds]
    while left > 0:
        options = [i for i, k in enumerate(kinds) if k.plan.dp <= left]
        if not options:
            return None
        pick = min(options, key=lambda i: lines[i][0] + lines[i][1] * (counts[i] + 1))
        counts[pick] += 1
        left -= kinds[pick].plan.dp
    shares = tuple(
        Share(k, c, k.time(shape, cluster, c)) for k, c in zip(kinds, counts, strict=True)
    )
    return MixedPlan(shares, exchange_seconds(shape, cluster, kinds))


def _affine(shape: ModelShape, cluster: MixedCluster, kind: Pipeline) -> tuple[float, float]:
    """(intercept, slope) of the kind's step time in its micro-batches per replica."""
    low = kind.least_micro_batches
    a, b = (kind.time(shape, cluster, m).total for m in (low, low + 1))
    return a - (b - a) * low, b - a


def exchange_seconds(shape: ModelShape, cluster: MixedCluster, kinds: Sequence[Pipeline]) -> float:
    """Gradients summed between pipeline kinds once a step, after each kind's own reduction:
    each rank's share of its stage's gradients over a ring of one rank per kind on the
    host-staged link between types (the rank holding the most sets the pace)."""
    if len(kinds) < 2:
        return 0.0
    width = cluster.groups[0].dtype_bytes
    most = max(
        stage_params(shape, k.plan, s).total * width for k in kinds for s in range(k.plan.pp)
    )
    return ring_time("all_reduce", most, len(kinds), cross_link(cluster))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]
