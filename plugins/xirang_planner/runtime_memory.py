"""What a training worker's memory holds beyond the tensors the planner counts, measured once
per host.

A worker's real peak (:mod:`.memory_peak`) is more than its model states, saved activations,
gathered parameters and communication buffers (:mod:`.memory`): its first step faults in
libtorch's code for autograd, the optimizer and the collectives (file-backed pages), and the
runtime keeps private memory of its own: strategy modules imported on first use, gloo's buffers,
thread stacks, oneDNN's scratch space, the allocator's slack; on an accelerator the allocator's
own temporaries. On a small model this is most of the peak (about 70 MB per CPU worker against a
few MB of tensors), and it does not grow with the model, so it is measured, not modelled:
``world`` fresh workers train a trivial model (the configured family with one layer per pipeline
stage, micro-batch 1) for a few steps under plain data parallel, then under each other kind of
wrapper a plan can use (sharding, tensor parallel, a pipeline, full recompute), then under each
pair of them the workers can hold, one after the other in the same workers, fewest kinds first
(each a plan the strategies accept: where these workers hold a kind or pair only beside another
kind, as tensor parallel over 2 of 4 workers needs sharding or a pipeline beside it, its run
holds that kind too and follows that kind's own; see :func:`probe_plans`). The first run's real
peak beyond what :mod:`.memory` predicts for its trivial model is the baseline every worker
pays; each later run's is what that kind, or pair, adds (the code, modules and buffers the
workers did not have yet, beyond what a plain data-parallel run at micro-batch 1 repeated in the
same workers reads: the heap memory every run re-faults after :meth:`~.peak.RealPeak.start`
trimmed it, which a fresh plan holds once, in the baseline, and not once per kind; tensor
parallel under full recompute re-runs DTensor's operations inside checkpointing's hooks, code
neither runs alone, measured 5-6 MB of file-backed pages beyond its kinds' on the benchmark's
plans). A plan is charged the baseline plus the additions of the kinds it combines and of each
pair of them. The figures are cached per host, device type, worker count, threads, model family
and the kinds measured, as the device calibration is.

What grows with the model is the allocator's slack: freed memory glibc's malloc keeps
resident for reuse (the middle of its heaps, and up to its trim threshold at their tops), which
``malloc_trim`` hands back. Measured on this host's plans of the benchmark's model: 6 MB of it
after a one-layer run at micro-batch 1, 14-20 MB after full-model runs at micro-batch 4-8, and
neither ``MALLOC_ARENA_MAX=1`` nor a fixed ``MALLOC_MMAP_THRESHOLD_`` changes it: it follows the
size of what one micro-batch allocates and frees (a pipeline of 16 single-sequence micro-batches
paid 1.3 MB above its prediction, the same tensors in 2 micro-batches of 8 paid 6.1 MB). So two
more trivial runs, plain data parallel at micro-batch 1 and at the largest micro-batch, after
the others in the same workers, measure the slack per byte of one micro-batch's activations
(``slack_per_byte``: the rise of their real peaks beyond prediction over the rise of their
micro-batch's activations); a plan pays it on the bytes by which its worst stage's micro-batch
exceeds the baseline run's.

The trivial runs are not the plans whose peaks the planner benchmark compares with: those are
measured in their own workers on the full model.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from xirang import get_registry, replace_text
from xirang.planning import (
    ModelShape,
    ParallelPlan,
    calibration_path,
    model_shape,
    plan_config,
    plan_problem,
    run_configs,
    run_device,
)
from xirang_planner.memory import activation_elements, in_flight, predict_memory

#: steps of each trivial run (the first builds buffers; the peak comes with the second)
PROBE_STEPS = 2
#: the largest micro-batch the slack probe runs (the planner's largest candidate)
SLACK_MICRO_BATCH = 8
#: how the figures are measured and derived: a cached entry of another method is measured again
METHOD = 3  # 3: pairs of kinds, each beyond a repeated plain run, the slack per micro-batch byte
#: the order kinds are measured in, then each pair of them; ``ddp`` is the baseline every
#: multi-worker plan pays; ``recompute``: activation checkpointing's code and the rebuilt layer's
#: autograd graph
KINDS = ("ddp", "fsdp", "tp", "pp", "recompute")


@dataclass(frozen=True)
class RuntimeMemory:
    """Bytes per worker beyond the predicted tensors, measured with ``world`` workers: the
    ``base`` every worker holds, and what each kind of wrapper adds to it."""

    world: int
    base: int
    added: dict[str, int]
    #: allocator slack per byte of one micro-batch's activations beyond the baseline run's
    slack_per_byte: float = 0.0
    #: one micro-batch's activation bytes in the baseline run (its slack is in ``base``)
    slack_from: int = 0

    def for_plan(self, plan: ParallelPlan) -> int:
        """The baseline plus the additions of the kinds ``plan`` combines and of each pair of
        them (``"tp+recompute"``: what the two together run that neither runs alone)."""
        kinds = sorted(plan_kinds(plan) - {"ddp"}, key=KINDS.index)
        pairs = [f"{a}+{b}" for a, b in itertools.combinations(kinds, 2)]
        return self.base + sum(self.added.get(k, 0) for k in kinds + pairs)

    def slack(self, micro_batch_bytes: float) -> int:
        """The allocator slack a plan whose worst stage allocates ``micro_batch_bytes`` of
        activations per micro-batch holds beyond the baseline's."""
        return round(self.slack_per_byte * max(0.0, micro_batch_bytes - self.slack_from))


def plan_kinds(plan: ParallelPlan) -> set[str]:
    """The kinds of wrapper ``plan`` combines (see :data:`KINDS`)."""
    kinds = {"ddp"} if plan.dp > 1 and plan.zero == 0 else set()
    if plan.dp > 1 and plan.zero > 0:
        kinds.add("fsdp")
    if plan.tp > 1:
        kinds.add("tp")
    if plan.pp > 1:
        kinds.add("pp")
    if plan.recompute != "none":
        kinds.add("recompute")
    return kinds


def probe_plans(shape: ModelShape, world: int) -> dict[str, ParallelPlan]:
    """One trivial plan per kind that ``world`` workers and this model allow, then one per pair
    of them, each a plan :func:`plan_problem` accepts on its trivial model, in the order they
    run: fewest kinds first.

    A kind or pair may only run together with another kind (tensor parallel over 2 of 4
    workers: the other 2 hold data-parallel replicas of its shards, which need sharding, or a
    pipeline). Its probe then runs after the probes of the fewer kinds it combines, so its
    addition is what it brings beyond them: its own and that of the combinations with the extra
    kind not measured yet, charged to every plan with its kinds (a plan without the extra kind
    pays a few MB more, not less). A pair a single kind's probe already holds is not probed
    again: its addition is in that kind's."""
    singles = {k: p for k in KINDS if (p := _probe_plan({k} - {"ddp"}, world, shape))}
    pairs = {
        f"{a}+{b}": plan
        for a, b in itertools.combinations([k for k in singles if k != "ddp"], 2)
        if not any({a, b} <= _held(p) for p in singles.values())
        and (plan := _probe_plan({a, b}, world, shape))
    }
    probes = {**singles, **pairs}
    return dict(sorted(probes.items(), key=lambda item: len(_held(item[1]))))


def _probe_plan(want: set[str], world: int, shape: ModelShape) -> ParallelPlan | None:
    """A trivial plan of ``world`` workers that holds every kind in ``want`` and as few others
    as it can (then the longest pipeline, as the probes always built them), valid on its
    trivial model; None where the workers cannot hold ``want``."""
    rc = "full" if "recompute" in want else "none"
    found = [
        plan
        for tp, pp in itertools.product(range(1, world + 1), repeat=2)
        if world % (tp * pp) == 0
        for zero in ((0, 3) if world > tp * pp else (0,))
        if want <= _held(plan := ParallelPlan(world // (tp * pp), tp, pp, zero=zero, recompute=rc))
        and not _probe_problem(plan, shape)
    ]
    return min(found, key=lambda p: (len(_held(p) - want), -p.pp, p.tp, p.zero), default=None)


def _probe_problem(plan: ParallelPlan, shape: ModelShape) -> str:
    """Why ``plan`` cannot run as a trivial run (:func:`_trivial`: a layer per stage, one
    micro-batch per rank and stage) of a model shaped like ``shape``."""
    return plan_problem(plan, replace(shape, layers=plan.pp), plan.dp * plan.pp * plan.micro_batch)


def _held(plan: ParallelPlan) -> set[str]:
    """The kinds ``plan`` combines beyond the baseline's plain data parallel."""
    return plan_kinds(plan) - {"ddp"}


def cached_runtime(config: dict[str, Any], world: int, refresh: bool = False) -> RuntimeMemory:
    """The runtime for ``world`` workers of ``config``'s model family on this host: from the
    cache, or measured (and stored) when absent or asked."""
    path = calibration_path(_cache_key(config, world))
    if path.exists() and not refresh:
        try:
            return RuntimeMemory(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # an unreadable entry is measured again, not trusted
    found = measure_runtime(config, world)
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_text(path, json.dumps(asdict(found), indent=2))
    return found


def _cache_key(config: dict[str, Any], world: int) -> str:
    import platform

    import torch

    where = run_device(config)
    threads = config["trainer"].get("threads") or 1
    return (
        f"runtime-{platform.node()}-{where.device['name']}-{world}w-{threads}t-"
        f"{config['model']['family']}-torch{torch.__version__}-{'+'.join(KINDS)}-m{METHOD}"
    )


def measure_runtime(config: dict[str, Any], world: int) -> RuntimeMemory:
    """The trivial runs in one set of fresh workers, plain data parallel first (see the module
    docstring)."""
    registry = get_registry()
    shape = model_shape(config, registry)
    assert shape is not None, "the planner only plans families with a parallelize plan"
    plans = probe_plans(shape, world)  # "ddp" first
    slack = {  # after every kind, so what they import is not counted again
        "slack-small": ParallelPlan(dp=world),
        "slack-large": ParallelPlan(dp=world, micro_batch=SLACK_MICRO_BATCH),
    }
    runs = [_trivial(config, shape, plan, registry) for plan in {**plans, **slack}.values()]
    configs = [
        plan_config(small, plan)
        for (small, _), plan in zip(runs, {**plans, **slack}.values(), strict=True)
    ]
    found = run_configs(configs, world, PROBE_STEPS)
    beyond, acts = {}, {}
    for i, (kind, plan) in enumerate({**plans, **slack}.items()):
        small, trivial = runs[i]
        predicted = predict_memory(trivial, plan, small["trainer"]["global_batch"]).total
        real = max(rank[i]["real_peak_bytes"] for rank in found)
        beyond[kind] = real - predicted if real else 0
        acts[kind] = micro_batch_bytes(trivial, plan, small["trainer"]["global_batch"])
    return derive_runtime(world, beyond, acts)


def derive_runtime(world: int, beyond: dict[str, int], acts: dict[str, float]) -> RuntimeMemory:
    """The runtime from each trivial run's real peak ``beyond`` its prediction and one
    micro-batch's activation bytes ``acts`` (keyed by kind, pair, ``slack-small`` and
    ``slack-large``; see the module docstring)."""
    beyond = dict(beyond)
    control = beyond.pop("slack-small")  # a run that adds nothing the workers lack
    rise = beyond.pop("slack-large") - control
    per_byte = max(0.0, rise / (acts["slack-large"] - acts["slack-small"]))
    base = max(0, beyond.pop("ddp"))
    added = {k: max(0, v - control) for k, v in beyond.items()}
    return RuntimeMemory(world, base, added, per_byte, round(acts["ddp"]))


def micro_batch_bytes(shape: ModelShape, plan: ParallelPlan, global_batch: int) -> float:
    """Activation bytes one micro-batch allocates on ``plan``'s worst stage, kept for backward
    or not (full recompute allocates and frees them in the forward, and again in the backward):
    what the allocator's slack follows (module docstring)."""
    whole = replace(plan, recompute="none")
    per_stage = (
        activation_elements(shape, whole, global_batch, s) / in_flight(whole, global_batch, s)
        for s in range(plan.pp)
    )
    return max(per_stage) * shape.dtype_bytes


def _trivial(
    config: dict[str, Any], shape: ModelShape, plan: ParallelPlan, registry: Any
) -> tuple[dict[str, Any], ModelShape]:
    """``config`` with one layer per pipeline stage and one micro-batch of ``plan``'s size per
    data-parallel rank and stage, and that model's shape."""
    fns = registry.spec("model", config["model"]["family"]).load_parallelize()
    model = {**config["model"], fns.layers_setting: plan.pp}
    micro = plan.micro_batch
    trainer = {**config["trainer"], "global_batch": plan.dp * plan.pp * micro, "micro_batch": micro}
    small = {**config, "model": model, "trainer": trainer}
    trivial = model_shape(small, registry)
    return small, replace(trivial or shape, layers=plan.pp)


def with_runtime(
    estimate: Any,
    runtime: RuntimeMemory | None,
    plan: ParallelPlan,
    shape: ModelShape,
    global_batch: int,
) -> Any:
    """``estimate`` (a :class:`~.memory.MemoryEstimate`) with the plan's runtime and the
    allocator's slack charged."""
    if runtime is None:
        return estimate
    slack = runtime.slack(micro_batch_bytes(shape, plan, global_batch))
    return replace(estimate, runtime=runtime.for_plan(plan), slack=slack)
