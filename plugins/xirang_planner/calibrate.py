"""Measure this host for the planner's step-time model, as a run of ``world`` workers sees it.

On one host the workers share cores, and small models spend much of their time outside the
arithmetic (operator dispatch, gloo latency), so a peak FLOP rate alone mispredicts. Measured
here, in ``world`` spawned workers:

- compute: one layer's forward and backward (the model family's own layer) and the rest of the
  model (embeddings, head, loss) per micro-batch size, on one worker alone with its thread
  share. A line ``fixed + per_sequence * micro_batch`` through the layer times separates the
  part that does not shrink when tensor parallel splits the layer's matrices (dispatch, norms)
  from the part that does: the efficiency curve of small GEMMs.
- cores really available: every worker runs the same layer at once; ``world * alone / at once``
  is how many compute at full speed (fewer than the cores when other work loads the machine).
- collectives: all-reduce on groups of each size, all groups at once (as a plan's groups run),
  fitted to the ring model (per-hop latency, bandwidth); a point-to-point message likewise.
- the optimizer step's cost per parameter.
- what FSDP and DDP cost beyond their collectives' bytes: hooks per micro-batch, copies and
  bookkeeping per collective call (:mod:`xirang_planner.wrapper_costs`).

Every timing is the best of several repeats: the machine may be loaded by other work, and the
best is the figure that load disturbs least.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from xirang.planning import (
    Link,
    RunDevice,
    available_cores,
    fit_link,
    run_device,
    run_group,
    synchronizer,
)
from xirang_planner.together import time_together
from xirang_planner.wrapper_costs import GROUP, WrapperCosts, derive, measure_wrappers

#: message sizes (bytes) the links are fitted on: latency- to bandwidth-bound (up to 8 MiB:
#: with 1 MiB the largest, gloo's per-hop latency on a shared host hid the bytes' time and the
#: fit could find no bandwidth at all)
MESSAGE_BYTES = (4096, 65536, 1048576, 8388608)
#: the micro-batch the concurrency probe runs
PROBE_MICRO_BATCH = 2
#: layer passes per probe: long enough that workers running them at once share the cores
PROBE_PASSES = 8
#: micro-batches of the probe pipeline (two stages of one layer each, micro-batch 1)
PROBE_PIPELINE_MICRO = 8
#: timed steps of the probe pipeline
PIPELINE_REPEATS = 3


@dataclass(frozen=True)
class StageCost:
    """Seconds of one micro-batch's forward and backward on one worker computing alone."""

    forward: float
    backward: float

    def scaled(self, factor: float) -> StageCost:
        return StageCost(self.forward * factor, self.backward * factor)

    def __add__(self, other: StageCost) -> StageCost:
        return StageCost(self.forward + other.forward, self.backward + other.backward)


@dataclass(frozen=True)
class HostProfile:
    """This host measured for ``world`` workers (compute in seconds of one worker alone)."""

    world: int
    #: workers that compute at full speed at once (at most the cores they share)
    slots: float
    layer: dict[int, StageCost]  # one layer, per micro-batch size
    rest: dict[int, StageCost]  # embeddings, final norm, head and loss, per micro-batch size
    #: share of a layer's time that does not shrink with its matrices (fit over micro-batches)
    layer_fixed: float
    optimizer_s_per_param: float
    links: dict[int, Link]  # ring link per group size, every group busy at once
    p2p: Link  # one point-to-point message between two workers
    #: ``{(tp, sequence parallel): {micro-batch: seconds}}`` of the one-layer model split by the
    #: family's tensor-parallel plan, every worker running it at once (collectives included)
    tp_model: dict[tuple[int, bool], dict[int, float]] = field(default_factory=dict)
    #: seconds from one stage's action ending to the next stage's starting on its output,
    #: through torch's pipeline schedule (its message handling and waking the peer included)
    pipeline_hop_s: float = 0.0
    #: bytes of the activation the hop was measured with
    pipeline_hop_bytes: int = 0
    #: core-seconds a stage spends on each action of torch's schedule beyond its layers'
    #: compute (the schedule's Python, posting and taking its messages): work that shares
    #: the cores as compute does, not a wait
    pipeline_action_s: float = 0.0
    #: what FSDP and DDP cost beyond their collectives' bytes (:mod:`.wrappers`)
    wrappers: WrapperCosts = field(default_factory=WrapperCosts)

    def hop_seconds(self, nbytes: float) -> float:
        """A pipeline hop carrying ``nbytes``: the measured hop, plus the extra bytes' time."""
        extra = max(0.0, nbytes - self.pipeline_hop_bytes)
        return self.pipeline_hop_s + extra / self.p2p.bandwidth_bps

    def layer_cost(self, micro_batch: int, tp: int, sp: bool = False) -> StageCost:
        """One layer on one tensor-parallel rank, as one worker alone would run it. Measured
        under the split where it was (its collectives and the split's per-operation overhead
        included); otherwise only the matrix part splits ``tp`` ways."""
        whole = _cost_at(self.layer, micro_batch)
        if tp > 1 and (tp, sp) in self.tp_model:
            rest = self.rest_cost(micro_batch)
            together = _on_line(self.tp_model[(tp, sp)], micro_batch)
            alone = together * self.slots / self.world - (rest.forward + rest.backward)
            total = whole.forward + whole.backward
            return whole.scaled(max(alone, total / tp) / total)
        fixed = min(self.layer_fixed, whole.forward + whole.backward)
        total = whole.forward + whole.backward
        return whole.scaled((fixed + (total - fixed) / tp) / total)

    def rest_cost(self, micro_batch: int) -> StageCost:
        """Embeddings, head and loss of one micro-batch, one worker alone."""
        return _cost_at(self.rest, micro_batch)

    def link(self, group: int) -> Link:
        """The measured link of the nearest group size (groups larger than measured: the
        largest)."""
        sizes = sorted(self.links)
        return self.links[min(sizes, key=lambda g: (abs(g - group), -g))]


def compute_slots(world: int, alone_s: float, together_s: float, cores: int) -> float:
    """How many of ``world`` workers compute at full speed at once: ``world * alone /
    together``, at least one and never more than the workers or the cores they may run on (a
    probe that finds more measured its lone worker below full speed, not extra cores)."""
    return min(float(min(world, cores)), max(1.0, world * alone_s / together_s))


def measure_host(config: dict[str, Any], world: int, micro_batches: list[int]) -> HostProfile:
    """Measure in ``world`` fresh workers (see the module docstring), each on its device of
    the run's device type, over the run's collective backend."""

    where = run_device(config)
    mbs = sorted(set(micro_batches))
    ranks = run_group(_probe, world, config, mbs, where, backend=where.collective)
    main = ranks[0]
    slots = compute_slots(world, main["alone_s"], main["together_s"], available_cores())
    profile = HostProfile(
        world=world,
        slots=slots,
        layer={mb: StageCost(*c) for mb, c in main["layer"].items()},
        rest={mb: StageCost(*c) for mb, c in main["rest"].items()},
        layer_fixed=_intercept({mb: sum(c) for mb, c in main["layer"].items()}),
        optimizer_s_per_param=main["optimizer_s_per_param"],
        links=_ring_links(main["rings"], main["busy"]) or {world: Link(1e-4, 1e9)},
        p2p=_busy_link(_fit_line(main["p2p"]), main["busy"].get("p2p", 0.0), 1),
        tp_model=main["tp_model"],
    )
    if "wrappers" in main:
        slowdown = world / slots  # the optimizer measured alone, the wrappers all at once
        per_param = main["optimizer_s_per_param"] * slowdown
        costs = derive(main["wrappers"], profile.link(GROUP), per_param)
        profile = replace(profile, wrappers=costs)
    if "pipeline_s" in main:
        cpu = sum(r["pipeline_cpu_s"] for r in ranks) / len(ranks)
        profile = replace(profile, pipeline_action_s=_action_overhead(profile, cpu))
        profile = replace(
            profile,
            pipeline_hop_s=_fit_hop(profile, main["pipeline_s"]),
            pipeline_hop_bytes=main["pipeline_bytes"],
        )
    return profile


def _action_overhead(profile: HostProfile, cpu_s: float) -> float:
    """Core-seconds per schedule action of the probe pipeline beyond its layer's compute,
    from a stage's processor time per step (``cpu_s``, the mean over the workers): on a host
    whose cores the stages share, torch's schedule costs a stage more processor time than
    its layer does, and that time is taken from the other workers', not waited out."""
    cost = profile.layer_cost(1, 1)
    compute = PROBE_PIPELINE_MICRO * (cost.forward + cost.backward)
    return max(0.0, cpu_s - compute) / (2 * PROBE_PIPELINE_MICRO)


def _fit_hop(profile: HostProfile, seconds: float) -> float:
    """The hop latency under which the simulated probe pipeline takes the measured
    ``seconds`` (the simulation grows with the hop, so bisection finds it)."""
    from xirang_planner.simulate import StageWork, simulate_step

    cost = profile.layer_cost(1, 1)
    action = profile.pipeline_action_s
    stages = [StageWork(cost.forward + action, cost.backward + action)] * 2
    replicas = profile.world // 2

    def simulated(hop: float) -> float:
        return simulate_step(stages, "1f1b", PROBE_PIPELINE_MICRO, hop, profile.slots, replicas)

    low, high = 0.0, seconds
    if simulated(low) >= seconds:
        return 0.0
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if simulated(mid) < seconds else (low, mid)
    return (low + high) / 2


def _ring_links(rings: dict[int, list], busy: dict[Any, float]) -> dict[int, Link]:
    """Per group size: bandwidth from the idle timings, latency the larger of the idle fit's
    and the one measured between computations (a hop then waits for a busy core)."""
    links = {}
    for g, rows in rings.items():
        idle = fit_link("all_reduce", [(n, g, t) for n, t in rows])
        links[g] = _busy_link(idle, busy.get(g, 0.0), 2 * (g - 1))
    return links


def _busy_link(idle: Link, op_seconds: float, hops: int) -> Link:
    return Link(max(idle.latency_s, op_seconds / hops), idle.bandwidth_bps)


def _probe(
    rank: int, world: int, config: dict[str, Any], micro_batches: list[int], where: RunDevice
) -> dict:
    """One worker's share of :func:`measure_host` (inside the group ``run_group`` opened)."""

    parts = _ModelParts(config, where.torch_device(rank))
    found: dict[str, Any] = {}
    if rank == 0:  # alone: the others wait in the barrier
        found["layer"] = {mb: parts.layer_times(mb) for mb in micro_batches}
        found["rest"] = {mb: parts.rest_times(mb) for mb in micro_batches}
        found["optimizer_s_per_param"] = parts.optimizer_time()
    found["alone_s"], found["together_s"] = _alone_and_together(rank, parts)
    groups = _my_groups(rank, world)
    found["rings"] = _ring_timings(groups, parts)
    found["p2p"] = _p2p_timings(rank, world, parts)
    found["busy"] = _busy_latencies(rank, world, parts, groups)
    ends = [micro_batches[0], micro_batches[-1]]
    found["tp_model"] = _tp_model_times(world, parts, sorted(set(ends)))
    if world % GROUP == 0:
        found["wrappers"] = measure_wrappers(world, parts, micro_batches[0])
    if world % 2 == 0:
        found["pipeline_s"], found["pipeline_cpu_s"] = _pipeline_probe(rank, world, parts)
        found["pipeline_bytes"] = parts.shape.seq_len * parts.shape.hidden * 4
    return found


class _ModelParts:
    """The configured model's layer and its remainder, timed on this worker's ``device``
    (:meth:`wait` ends a timing: a device runs its queued work after the call returns)."""

    def __init__(self, config: dict[str, Any], device: Any = "cpu") -> None:
        import torch

        from xirang import get_registry

        registry = get_registry()
        family = config["model"]["family"]
        settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
        self.family, self.settings = registry.load("model", family), settings
        self.fns = fns = registry.spec("model", family).load_parallelize()
        self.device = torch.device(device)
        self.wait = synchronizer(self.device)
        self.whole = _on_device(self.family.from_config(self.resized(1)), self.device)
        self.rest = _on_device(self.family.from_config(self.resized(0)), self.device)
        self.block = next(iter(fns.layers(self.whole).values()))
        self.shape = fns.shape(settings, config["data"]["seq_len"])
        self.config = config

    def resized(self, layers: int) -> dict[str, Any]:
        """The model's settings with ``layers`` layers (the family names that setting)."""
        return {**self.settings, self.fns.layers_setting: layers}

    def layer_times(self, micro_batch: int) -> tuple[float, float]:
        """Forward and backward seconds of one layer (best of repeats)."""
        import torch

        shape = (micro_batch, self.shape.seq_len, self.shape.hidden)
        x = torch.randn(shape, device=self.device, requires_grad=True)
        return _forward_backward(lambda: self.block(x).sum(), self.wait)

    def rest_times(self, micro_batch: int) -> tuple[float, float]:
        """Forward and backward seconds of the model without layers (embeddings to loss)."""
        tokens = self.tokens(micro_batch)
        return _forward_backward(lambda: self.rest(tokens, tokens), self.wait)

    def tokens(self, micro_batch: int) -> Any:
        """A random micro-batch of token ids on this worker's device."""
        import torch

        shape = (micro_batch, self.shape.seq_len)
        return torch.randint(0, self.shape.vocab, shape, device=self.device)

    def layer_copy(self) -> Any:
        """A fresh copy of the model's layer (a probe pipeline's stage)."""
        import copy

        return copy.deepcopy(self.block)

    def split_model(self, mesh: Any, sequence_parallel: bool) -> Any:
        """A fresh one-layer model split over ``mesh`` by the family's tensor-parallel plan."""
        import torch

        torch.manual_seed(0)
        model = _on_device(self.family.from_config(self.resized(1)), self.device)
        self.fns.apply_tp(model, mesh, sequence_parallel)
        return model

    def model_pass(self, model: Any, micro_batch: int) -> Callable[[], None]:
        """One forward and backward of ``model`` on a micro-batch (warmed up once)."""
        tokens = self.tokens(micro_batch)

        def run() -> None:
            model(tokens, tokens).backward()
            self.wait()

        run()
        return run

    def optimizer_time(self) -> float:
        """Seconds per parameter of one optimizer step."""
        from xirang.parallel import build_optimizer

        optimizer = build_optimizer(self.whole, self.config["optim"])
        params = [p for p in self.whole.parameters() if p.requires_grad]
        for p in params:
            p.grad = p.detach().clone()
        seconds = _best(lambda: (optimizer.step(), self.wait()))
        optimizer.zero_grad(set_to_none=True)
        return seconds / sum(p.numel() for p in params)

    def passes(
        self, micro_batch: int, count: int, between: Callable[[], Any] | None = None
    ) -> None:
        """``count`` forward-backward passes of the layer, ``between()`` after each."""
        import torch

        shape = (micro_batch, self.shape.seq_len, self.shape.hidden)
        x = torch.randn(shape, device=self.device, requires_grad=True)
        for _ in range(count):
            self.block(x).sum().backward()
            if between is not None:
                between()
        self.wait()


def _tp_model_times(
    world: int, parts: _ModelParts, micro_batches: list[int]
) -> dict[tuple[int, bool], dict[int, float]]:
    """Seconds of the one-layer model's forward and backward under each tensor-parallel split
    the model allows (with and without sequence parallel), every worker in a group of ``tp``
    at once."""
    from torch.distributed.device_mesh import init_device_mesh

    found: dict[tuple[int, bool], dict[int, float]] = {}
    for tp in (g for g in range(2, world + 1) if world % g == 0 and _splits_heads(parts.shape, g)):
        shape = (world // tp, tp)
        mesh = init_device_mesh(parts.device.type, shape, mesh_dim_names=("dp", "tp"))
        for sp in (False, True) if parts.shape.seq_len % tp == 0 else (False,):
            model = parts.split_model(mesh["tp"], sp)
            found[(tp, sp)] = {
                mb: time_together(parts.model_pass(model, mb)) for mb in micro_batches
            }
    return found


def _splits_heads(shape: Any, tp: int) -> bool:
    """Whether ``tp`` divides the query and the key/value heads, as plan_problem requires (a
    Llama's grouped key/value heads are fewer: llama_tiny's 2 do not split 4 ways)."""
    return shape.heads % tp == 0 and (shape.kv_heads or shape.heads) % tp == 0


def _pipeline_probe(rank: int, world: int, parts: _ModelParts) -> tuple[float, float]:
    """Best seconds of a 1F1B step of two-stage pipelines (rank pairs, all at once), each
    stage one layer of the model at micro-batch 1: torch's schedule as the strategies run it;
    and this worker's processor seconds per step (all its threads), over the timed steps."""
    import torch
    import torch.distributed as dist
    from torch.distributed import pipelining

    pairs = [dist.new_group([s, s + 1]) for s in range(0, world, 2)]
    index = rank % 2
    stage = pipelining.PipelineStage(
        parts.layer_copy(), index, 2, parts.device, group=pairs[rank // 2]
    )
    schedule = pipelining.Schedule1F1B(stage, PROBE_PIPELINE_MICRO, loss_fn=_mean_square)
    shape = (PROBE_PIPELINE_MICRO, parts.shape.seq_len, parts.shape.hidden)
    x = torch.randn(shape, device=parts.device)

    def step() -> None:
        if index == 0:
            schedule.step(x)
        else:
            schedule.step(target=x, losses=[])
        parts.wait()

    step()  # the first step settles shapes
    started = time.process_time()
    seconds = time_together(step, PIPELINE_REPEATS)
    return seconds, (time.process_time() - started) / PIPELINE_REPEATS


def _mean_square(out: Any, target: Any) -> Any:
    return (out - target).pow(2).mean()


def _on_line(points: dict[int, float], x: int) -> float:
    """``points`` interpolated (or extended) linearly at ``x``."""
    xs = sorted(points)
    if len(xs) == 1:
        return points[xs[0]] * x / xs[0]
    lo, hi = xs[0], xs[-1]
    return points[lo] + (points[hi] - points[lo]) * (x - lo) / (hi - lo)


def _cost_at(costs: dict[int, StageCost], micro_batch: int) -> StageCost:
    """The measured cost at ``micro_batch``, or the line through the measured ones."""
    if micro_batch in costs:
        return costs[micro_batch]
    forward = _on_line({mb: c.forward for mb, c in costs.items()}, micro_batch)
    backward = _on_line({mb: c.backward for mb, c in costs.items()}, micro_batch)
    return StageCost(max(forward, 0.0), max(backward, 0.0))


def _forward_backward(
    loss_fn: Callable[[], Any], wait: Callable[[], None], repeats: int = 5
) -> tuple[float, float]:
    """Best forward seconds and best forward+backward seconds minus it (each until ``wait``
    says the device has finished)."""

    def forward() -> None:
        loss_fn()
        wait()

    def both() -> None:
        loss_fn().backward()
        wait()

    forward_s = _best(forward, repeats)
    return forward_s, max(_best(both, repeats) - forward_s, 0.0)


def _on_device(model: object, device: Any) -> Any:
    """A family's freshly built model on ``device`` (the ``Model`` protocol leaves ``to`` to
    torch: every family builds a torch module)."""
    import torch

    assert isinstance(model, torch.nn.Module), f"{type(model).__name__} is not a torch module"
    return model.to(device)


def _best(fn: Callable[[], Any], repeats: int = 5) -> float:
    """Best of ``repeats`` timed calls after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def _alone_and_together(rank: int, parts: _ModelParts, rounds: int = 4) -> tuple[float, float]:
    """Best seconds of the probe passes on rank 0 alone and on every worker at once, taken in
    alternating rounds so that both see the same spells of outside load."""
    import torch.distributed as dist

    def probe() -> None:
        parts.passes(PROBE_MICRO_BATCH, PROBE_PASSES)

    probe()  # warm-up
    alone = together = float("inf")
    for _ in range(rounds):
        dist.barrier()
        if rank == 0:
            alone = min(alone, _best(probe, repeats=1))
        together = min(together, time_together(probe, repeats=1))
    return alone, together


def _my_groups(rank: int, world: int) -> dict[int, Any]:
    """This worker's group of each size dividing ``world`` (consecutive ranks); every worker
    creates every group, as ``new_group`` requires."""
    import torch.distributed as dist

    mine = {}
    for size in (g for g in range(2, world + 1) if world % g == 0):
        groups = [dist.new_group(list(range(s, s + size))) for s in range(0, world, size)]
        mine[size] = groups[rank // size]
    return mine


def _busy_latencies(
    rank: int, world: int, parts: _ModelParts, groups: dict[int, Any]
) -> dict[Any, float]:
    """Seconds one small collective adds when it sits between computations on every worker, as
    tensor-parallel and sharded layers place them: ``{group size: all-reduce, "p2p": one
    message}``. On a host whose cores are all busy a hop waits for its peer to be scheduled,
    which an idle ping does not see."""
    import torch
    import torch.distributed as dist

    mb, count = 1, PROBE_PASSES
    alone = time_together(lambda: parts.passes(mb, count))
    tensor = torch.ones(MESSAGE_BYTES[0] // 4, device=parts.device)
    found: dict[Any, float] = {}
    for size, mine in groups.items():

        def reduce(g: Any = mine) -> None:
            dist.all_reduce(tensor, group=g)

        def passes(between: Callable[[], None] = reduce) -> None:
            parts.passes(mb, count, between)

        found[size] = max(0.0, time_together(passes) - alone)
        found[size] /= count
    if world >= 2:
        peer = rank ^ 1

        def exchange() -> None:
            if peer < world:
                _round_trip(rank, peer, tensor)

        found["p2p"] = max(0.0, time_together(lambda: parts.passes(mb, count, exchange)) - alone)
        found["p2p"] /= 2 * count
    return found


def _round_trip(rank: int, peer: int, tensor: Any) -> None:
    import torch.distributed as dist

    if rank % 2 == 0:
        dist.send(tensor, peer)
        dist.recv(tensor, peer)
    else:
        dist.recv(tensor, peer)
        dist.send(tensor, peer)


def _ring_timings(groups: dict[int, Any], parts: _ModelParts, repeats: int = 5) -> dict[int, list]:
    """``{group size: [(bytes, seconds)]}`` of all-reduce on each group size, all groups at
    once, on this worker's device."""
    import torch
    import torch.distributed as dist

    timings: dict[int, list] = {}
    for size, mine in groups.items():
        rows = []
        for nbytes in MESSAGE_BYTES:
            tensor = torch.ones(nbytes // 4, device=parts.device)
            dist.barrier()

            def reduce(t: Any = tensor, g: Any = mine) -> None:
                _all_reduce(t, g)
                parts.wait()

            rows.append((nbytes, _best(reduce, repeats)))
        timings[size] = rows
    return timings


def _p2p_timings(
    rank: int, world: int, parts: _ModelParts, repeats: int = 5
) -> list[tuple[int, float]]:
    """``[(bytes, seconds)]`` of one message, from half a round trip between rank pairs."""
    import torch
    import torch.distributed as dist

    peer = rank ^ 1
    rows = []
    for nbytes in MESSAGE_BYTES:
        tensor = torch.ones(nbytes // 4, device=parts.device)
        dist.barrier()
        if peer >= world:
            continue

        def trip(t: Any = tensor) -> None:
            _round_trip(rank, peer, t)
            parts.wait()

        rows.append((nbytes, _best(trip, repeats) / 2))
    return rows


def _fit_line(rows: list[tuple[int, float]]) -> Link:
    """Latency and bandwidth of ``seconds = latency + bytes / bandwidth``."""
    import numpy as np

    if len(rows) < 2:
        return Link(1e-4, 1e9)
    a = np.array([[1.0, n] for n, _ in rows])
    (latency, inv_bw), *_ = np.linalg.lstsq(a, np.array([t for _, t in rows]), rcond=None)
    return Link(max(float(latency), 1e-9), 1 / max(float(inv_bw), 1e-15))


def _intercept(seconds: dict[int, float]) -> float:
    """Where the line through ``(micro_batch, seconds)`` meets micro-batch 0 (>= 0)."""
    import numpy as np

    if len(seconds) < 2:
        return 0.0
    mbs = sorted(seconds)
    _slope, intercept = np.polyfit(mbs, [seconds[mb] for mb in mbs], 1)
    return max(float(intercept), 0.0)


def _all_reduce(tensor: Any, group: Any) -> None:
    import torch.distributed as dist

    dist.all_reduce(tensor, group=group)
