"""The plan record: how one training step is split over devices, and the checks that refuse a
plan which cannot work before any process starts, naming the nearest plans that can."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from xirang_core.errors import ConfigError

RECOMPUTE = ("none", "full")
SCHEDULES = ("gpipe", "1f1b")
ZERO_STAGES = (0, 1, 2, 3)
#: micro-batch sizes the planner tries
MICRO_BATCHES = (1, 2, 4, 8)


class PlanError(ConfigError):
    """A parallel plan that cannot run on this world size or this model."""


@dataclass(frozen=True)
class ModelShape:
    """What the memory and time models need to know about a transformer."""

    layers: int
    hidden: int
    heads: int
    vocab: int
    seq_len: int
    params: int
    #: rows of the learned position table (0 when positions are not learned)
    positions: int = 0
    #: embeddings shared with the output head (GPT-2 style): one copy, unless pipeline-split
    tied_embeddings: bool = True
    #: bytes per activation element and per model-state element of one copy
    dtype_bytes: int = 4
    #: the model splits its family implements for it: "tp" (tensor/sequence parallel), "pp"
    splits: tuple[str, ...] = ("tp", "pp")
    #: key/value heads under grouped-query attention (0: as many as ``heads``)
    kv_heads: int = 0
    #: parameters of one layer (0: a GPT-2 block's 12·h² + 4·h; SwiGLU and GQA differ)
    layer_params: int = 0
    #: activation elements per layer and token, in units of h, that tensor parallel splits:
    #: a GPT-2 block's q, k, v (3), attention output (1) and MLP (8) (see xirang_planner/memory.py)
    split_activations: float = 12.0
    #: tensor parallel splits the embedding table by rows and the head by columns (its loss
    #: computed on the split logits): the ends hold 1/t of their parameters and logits
    vocab_parallel: bool = False

    def layer_size(self) -> int:
        """Parameters of one layer."""
        return self.layer_params or 12 * self.hidden * self.hidden + 4 * self.hidden


@dataclass(frozen=True)
class ParallelPlan:
    """Degrees of data (dp), tensor (tp) and pipeline (pp) parallelism and their options.

    ``micro_batch`` is the sequences per forward pass on one data-parallel rank; a plan never
    changes the global batch, only splits it: ``dp * micro_batch * micro_batches``.
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    sp: bool = False
    zero: int = 0
    micro_batch: int = 1
    recompute: str = "none"
    schedule: str = "1f1b"
    #: layers of each pipeline stage, first to last (empty: balanced, see :meth:`layer_counts`);
    #: uneven when the stages run on devices of unequal speed or memory
    stage_layers: tuple[int, ...] = ()

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    def layer_counts(self, layers: int) -> tuple[int, ...]:
        """Layers of each stage: the given ``stage_layers``, else the balanced contiguous split
        (later stages take the remainder: the first also holds the embeddings)."""
        if self.stage_layers:
            return self.stage_layers
        bounds = (stage_bounds(layers, s, self.pp) for s in range(self.pp))
        return tuple(hi - lo for lo, hi in bounds)

    def stage_range(self, stage: int, layers: int) -> tuple[int, int]:
        """The layer range ``[lo, hi)`` pipeline stage ``stage`` runs."""
        counts = self.layer_counts(layers)
        lo = sum(counts[:stage])
        return lo, lo + counts[stage]

    def micro_batches(self, global_batch: int) -> int:
        """Forward passes per optimizer step on one data-parallel rank."""
        return global_batch // (self.dp * self.micro_batch)

    def strategy(self) -> str:
        """The registered strategy name that runs this plan."""
        split = [n for n, d in (("tp", self.tp), ("pp", self.pp)) if d > 1]
        if not split and (self.recompute == "none" or (self.dp > 1 and self.zero > 0)):
            if self.dp == 1:
                return "single"
            return "ddp" if self.zero == 0 else "fsdp"
        if not split:  # single and ddp do not recompute: the mesh strategy does
            return "hybrid"
        if len(split) == 1 and self.dp == 1:
            return "sp" if self.sp else split[0]
        return "hybrid"

    def settings(self) -> dict[str, object]:
        """The ``parallel`` config section that runs this plan (``trainer.micro_batch`` aside)."""
        name = self.strategy()
        if name == "single":
            return {"name": name}
        if name == "ddp":
            return {"name": name, "bucket_cap_mb": 25, "static_graph": False}
        settings: dict[str, object] = {
            "name": name,
            "dp": self.dp,
            "tp": self.tp,
            "pp": self.pp,
            "sp": self.sp,
            "zero": self.zero,
            "recompute": self.recompute,
            "schedule": self.schedule,
        }
        if self.stage_layers:
            settings["stage_layers"] = list(self.stage_layers)
        return settings

    def label(self) -> str:
        parts = [f"dp{self.dp}", f"tp{self.tp}", f"pp{self.pp}"]
        extras = [f"zero{self.zero}", f"mb{self.micro_batch}"]
        if self.sp:
            extras.append("sp")
        if self.recompute != "none":
            extras.append(f"rc-{self.recompute}")
        if self.pp > 1:
            extras.append(self.schedule)
        if self.stage_layers:
            extras.append("layers" + "-".join(map(str, self.stage_layers)))
        return "x".join(parts) + " " + " ".join(extras)


def stage_bounds(layers: int, stage: int, stages: int) -> tuple[int, int]:
    """Layer range of ``stage``: sizes differ by at most one, later stages take the extra
    layers because the first stage also holds the embeddings."""
    base, extra = divmod(layers, stages)
    lo = stage * base + max(0, stage - (stages - extra))
    return lo, lo + base + (1 if stage >= stages - extra else 0)


def speed_split(
    speeds: Sequence[float], layers: int, capacities: Sequence[int] | None = None
) -> tuple[int, ...]:
    """Layers of each pipeline stage (``parallel.stage_layers=auto``), first to last, for
    stages whose devices run ``speeds`` layers a second and hold at most ``capacities``
    layers: the slowest stage's time, ``max(count / speed)``, as small as it can be.

    Layers are alike, so the least slowest time ``T`` is the first at which the stages hold
    every layer (each ``min(capacity, floor(T · speed))``); stages then give back the surplus,
    the one furthest behind first (on a tie the earlier one, so equal speeds give the even
    split of :func:`stage_bounds`, and a faster stage never ends with fewer layers than a
    slower one of the same capacity). :class:`PlanError` when no split fits."""
    stages = len(speeds)
    caps = [min(c, layers) for c in capacities] if capacities is not None else [layers] * stages
    if stages > layers:
        raise PlanError(
            f"parallel.stage_layers=auto: {stages} pipeline stages need at least {stages} "
            f"layers, the model has {layers}; use at most {layers} stages (parallel.pp)"
        )
    short = [s for s, cap in enumerate(caps) if cap < 1]
    if short or sum(caps) < layers:
        where = f"stage {short[0]} cannot hold one layer" if short else f"they hold {sum(caps)}"
        raise PlanError(
            f"parallel.stage_layers=auto: the stages' devices cannot hold the model's {layers} "
            f"layers ({where}; most layers each: {caps}); use more stages, devices with more "
            f"memory, or parallel.recompute=full"
        )

    def held(t: float) -> list[int]:
        """The layers each stage holds within time ``t``."""
        return [min(c, math.floor(t * v * (1 + 1e-9))) for c, v in zip(caps, speeds, strict=True)]

    times = sorted({n / v for c, v in zip(caps, speeds, strict=True) for n in range(1, c + 1)})
    counts = next(c for c in map(held, times) if min(c) >= 1 and sum(c) >= layers)
    for _ in range(sum(counts) - layers):
        behind = max(
            (s for s in range(stages) if counts[s] > 1),
            key=lambda s: (counts[s] / speeds[s], -s),
        )
        counts[behind] -= 1
    return tuple(counts)


def resolve_degrees(dp: int, tp: int, pp: int, world: int) -> tuple[int, int, int]:
    """Fill the one degree given as 0 with what the others leave of ``world``; check the product."""
    degrees = {"dp": dp, "tp": tp, "pp": pp}
    if any(d < 0 for d in degrees.values()):
        raise PlanError(f"parallel degrees must be >= 0 (0 = the rest of the workers): {degrees}")
    free = [k for k, d in degrees.items() if d == 0]
    if len(free) > 1:
        raise PlanError(f"only one of dp, tp, pp may be 0 (the rest of the workers); got {degrees}")
    fixed = 1
    for key, value in degrees.items():
        fixed *= value if key not in free else 1
    if free:
        if world % fixed:
            raise PlanError(
                f"world size {world} is not divisible by the fixed degrees {fixed} "
                f"({_fmt(degrees)}). {_suggest(world)}"
            )
        degrees[free[0]] = world // fixed
    if degrees["dp"] * degrees["tp"] * degrees["pp"] != world:
        raise PlanError(
            f"world size {world} is not dp x tp x pp = {_fmt(degrees)}. {_suggest(world)}"
        )
    return degrees["dp"], degrees["tp"], degrees["pp"]


def check_plan(plan: ParallelPlan, shape: ModelShape, global_batch: int) -> None:
    """Refuse a plan that cannot run, with the reason and the nearest valid plans."""
    reason = plan_problem(plan, shape, global_batch)
    if reason:
        near = nearest_valid(plan, shape, global_batch)
        hint = "; ".join(p.label() for p in near) or "none for this world size"
        raise PlanError(f"plan {plan.label()} cannot run: {reason}. Nearest valid plans: {hint}")


def plan_problem(plan: ParallelPlan, shape: ModelShape, global_batch: int) -> str:
    """Why ``plan`` cannot run, or an empty string when it can."""
    checks = [
        (plan.zero not in ZERO_STAGES, f"zero={plan.zero} is not one of {ZERO_STAGES}"),
        (plan.recompute not in RECOMPUTE, f"recompute={plan.recompute!r} not in {RECOMPUTE}"),
        (plan.schedule not in SCHEDULES, f"schedule={plan.schedule!r} not in {SCHEDULES}"),
        (
            plan.tp > 1 and "tp" not in shape.splits,
            f"tp={plan.tp}: this model family has no tensor-parallel layout for this model",
        ),
        (
            plan.pp > 1 and "pp" not in shape.splits,
            f"pp={plan.pp}: this model family cannot cut this model into pipeline stages",
        ),
        (shape.heads % plan.tp != 0, f"tp={plan.tp} does not divide the {shape.heads} heads"),
        (
            shape.kv_heads % plan.tp != 0,
            f"tp={plan.tp} does not divide the {shape.kv_heads} key/value heads",
        ),
        (plan.sp and plan.tp == 1, "sequence parallel (sp) needs tp > 1"),
        (
            plan.sp and shape.seq_len % plan.tp != 0,
            f"sp needs tp={plan.tp} to divide the sequence length {shape.seq_len}",
        ),
        (plan.pp > shape.layers, f"pp={plan.pp} exceeds the {shape.layers} layers"),
        (
            bool(plan.stage_layers),
            stage_layers_problem(plan.stage_layers, plan.pp, shape.layers),
        ),
        (
            plan.zero == 0 and plan.tp > 1 and plan.dp > 1,
            "data parallel over tensor-parallel shards needs zero >= 1 (FSDP)",
        ),
    ]
    for bad, why in checks:
        if bad and why:
            return why
    return batch_problem(plan, global_batch)


def stage_layers_problem(stage_layers: Sequence[int], stages: int, layers: int) -> str:
    """Why ``stage_layers`` (``parallel.stage_layers``: layers per pipeline stage, first to
    last) cannot split ``layers`` layers into ``stages`` stages, or an empty string."""
    given = list(stage_layers)
    valid = (
        f"give {stages} whole numbers (one per pipeline stage), each at least 1, summing to "
        f"the model's {layers} layers"
    )
    if stages < 2:
        return (
            f"parallel.stage_layers={given}: needs a pipeline (pp >= 2); this plan has pp={stages}"
        )
    if any(isinstance(n, bool) or not isinstance(n, int) for n in given):
        return f"parallel.stage_layers={given}: {valid}"
    if len(given) != stages or min(given) < 1 or sum(given) != layers:
        return f"parallel.stage_layers={given}: {valid}"
    return ""


def batch_problem(plan: ParallelPlan, global_batch: int) -> str:
    """Why ``global_batch`` cannot be split as ``plan`` splits it, or an empty string: the part
    of :func:`plan_problem` that needs no model shape, which the scheduler's placement and the
    config's own check apply too, so nothing the planner offers is refused later."""
    if plan.micro_batch < 1:
        return f"micro_batch={plan.micro_batch} must be >= 1"
    if global_batch % (plan.dp * plan.micro_batch):
        return (
            f"global batch {global_batch} is not a multiple of dp x micro_batch = "
            f"{plan.dp} x {plan.micro_batch}"
        )
    micro = plan.micro_batches(global_batch)
    if plan.pp > 1 and plan.schedule == "1f1b" and micro < plan.pp:
        return f"1f1b needs at least pp={plan.pp} micro-batches per step, this plan has {micro}"
    return ""


def degrees_on(workers: int, parallel: dict[str, Any]) -> tuple[int, int, int] | None:
    """The (dp, tp, pp) a parallel section makes of ``workers`` workers (data parallel over
    every worker for a strategy without degrees, and over the workers ``tp`` and ``pp`` leave
    for one without ``dp``, as Colossal-AI's plugins do); None when its degrees do not fit."""
    names = ("dp", "tp", "pp")
    if not any(d in parallel for d in names):
        return workers, 1, 1
    try:
        dp, tp, pp = (int(parallel.get(d, 0 if d == "dp" else 1)) for d in names)
        return resolve_degrees(dp, tp, pp, workers)
    except PlanError:
        return None


def workers_problem(workers: int, config: dict[str, Any]) -> str:
    """Why a run's config cannot run on ``workers`` workers, or an empty string: its parallel
    section's degrees, then :func:`batch_problem` for its global batch and micro-batch."""
    trainer, parallel = config["trainer"], config.get("parallel") or {}
    degrees = degrees_on(workers, parallel)
    if degrees is None:
        return f"the degrees of parallel={parallel.get('name')} do not fit {workers} workers"
    schedule = parallel.get("schedule", "1f1b")
    split = ParallelPlan(*degrees, micro_batch=trainer["micro_batch"], schedule=schedule)
    return batch_problem(split, trainer["global_batch"])


def candidate_plans(
    world: int, shape: ModelShape, global_batch: int, micro_batches: Iterable[int] = MICRO_BATCHES
) -> list[ParallelPlan]:
    """Every valid plan for ``world`` devices (degrees, sp, zero, micro-batch, recompute)."""
    found = []
    for dp, tp in itertools.product(_divisors(world), _divisors(world)):
        if world % (dp * tp):
            continue
        pp = world // (dp * tp)
        for sp, zero, mb, rc, sched in itertools.product(
            (False, True), ZERO_STAGES, micro_batches, RECOMPUTE, SCHEDULES
        ):
            plan = ParallelPlan(dp, tp, pp, sp, zero, mb, rc, sched)
            redundant = (dp == 1 and zero > 0) or (pp == 1 and sched != "1f1b")
            if not redundant and not plan_problem(plan, shape, global_batch):
                found.append(plan)
    return found


def nearest_valid(
    plan: ParallelPlan, shape: ModelShape, global_batch: int, limit: int = 3
) -> list[ParallelPlan]:
    """Valid plans on the same world size that change the fewest settings of ``plan``."""
    mbs = sorted({plan.micro_batch, *MICRO_BATCHES} - {0})
    pool = candidate_plans(plan.world, shape, global_batch, mbs)
    return sorted(pool, key=lambda p: (_distance(plan, p), p.label()))[:limit]


def _distance(a: ParallelPlan, b: ParallelPlan) -> int:
    fields = (
        "dp",
        "tp",
        "pp",
        "sp",
        "zero",
        "micro_batch",
        "recompute",
        "schedule",
        "stage_layers",
    )
    return sum(getattr(a, f) != getattr(b, f) for f in fields)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _fmt(degrees: dict[str, int]) -> str:
    return " x ".join(f"{k}={v}" for k, v in degrees.items())


def _suggest(world: int) -> str:
    splits = [
        f"dp={d} tp={t} pp={world // (d * t)}"
        for d in _divisors(world)
        for t in _divisors(world // d)
    ][:6]
    return f"Valid splits of {world}: " + ", ".join(splits)
