"""Run a plan for a few steps on real worker processes and measure it.

Used by the smoke run of ``xirang plan --smoke`` / ``parallel=auto`` and by the tests that hold
every strategy to the single-process loss. Workers train on synthetic token batches whose draw
depends only on (seed, step, position in the global batch), so every split of one global batch
sees the same sequences and losses are comparable across plans.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from xirang.planning.ondevice import RunDevice
from xirang_core.parallel.plan import ParallelPlan

#: steps not timed: the first step builds buffers, the pipeline infers shapes
WARMUP_STEPS = 1
#: steps whose saved tensors are counted (the first: warm-up; the second: a settled step).
#: The count's hooks run Python for every tensor autograd saves, so no timed step carries
#: them: the steps after these are the timed ones
METERED_STEPS = 2


@dataclass
class Measurement:
    """What a short run of one plan measured (memory: the worst worker)."""

    plan: str
    losses: list[float]
    step_s: float  # median over the timed steps
    best_step_s: float  # the fastest timed step: what load from other work disturbs least
    peak_bytes: int
    state_bytes: int
    activation_bytes: int
    gathered_bytes: int
    shares: dict[str, float] = field(default_factory=dict)
    #: the worst worker's real peak over its baseline (xirang.planning.memory_peak): everything
    #: the tensor accounting above leaves out included; 0 where the platform cannot tell
    real_peak_bytes: int = 0


class SyntheticBatches:
    """Learnable token rows per (step, index in the global batch): each row counts up from a
    random start by a random stride (mod the vocabulary), so the loss falls within a few steps.
    ``get`` takes this data-parallel rank's micro-batch number, as the real batches do."""

    def __init__(self, vocab: int, seq_len: int, micro: int, seed: int, rank: int, accum: int):
        self.vocab, self.seq_len, self.micro, self.seed = vocab, seq_len, micro, seed
        self.rank, self.accum = rank, accum

    def get(self, step: int, micro: int = 0) -> tuple[Any, Any]:
        import torch

        first = (self.rank * self.accum + micro) * self.micro
        rows = []
        for row in range(first, first + self.micro):
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step * 10_007 + row)
            start, stride = torch.randint(0, self.vocab, (2,), generator=gen).tolist()
            positions = torch.arange(self.seq_len + 1)
            rows.append((start + (1 + stride % 3) * positions) % self.vocab)
        tokens = torch.stack(rows)
        return tokens[:, :-1], tokens[:, 1:]

    def loss_weight(self, step: int, micro: int) -> float:
        """Every target trains: each micro-batch's mean loss counts alike."""
        return 1.0


def plan_config(config: dict[str, Any], plan: ParallelPlan) -> dict[str, Any]:
    """``config`` set up to run ``plan``: its strategy, worker count and micro-batch."""
    trainer = {**config["trainer"], "nproc": plan.world, "micro_batch": plan.micro_batch}
    return {**config, "parallel": plan.settings(), "trainer": trainer}


def run_plans(
    config: dict[str, Any],
    plans: list[ParallelPlan],
    steps: int,
    threads: int = 1,
    profile: bool = False,
) -> list[Measurement]:
    """Train each plan for ``steps`` steps, one after another in the same ``world`` fresh worker
    processes (all plans must use the same number of devices); measure each."""
    worlds = {p.world for p in plans}
    if len(worlds) != 1:
        raise ValueError(f"plans of one smoke run share a world size; got {sorted(worlds)}")
    configs = [plan_config(config, p) for p in plans]
    found = run_configs(configs, worlds.pop(), steps, threads, profile)
    return [_combine(plan, [r[i] for r in found]) for i, plan in enumerate(plans)]


def run_configs(
    configs: list[dict[str, Any]], world: int, steps: int, threads: int = 1, profile: bool = False
) -> list[list[dict[str, Any]]]:
    """Per rank, the measurements of each run config (any ``parallel`` section, e.g. a plugin's
    strategy) trained in turn by ``world`` fresh workers."""
    from xirang.comm.launch import run_group
    from xirang.planning.ondevice import run_device

    where = run_device(configs[0])  # every plan of one smoke run trains on the run's device
    return run_group(
        _measure_plans,
        world,
        configs,
        steps,
        profile,
        where,
        threads=threads,
        backend=where.collective,
    )


def _combine(plan: ParallelPlan, results: list[dict[str, Any]]) -> Measurement:
    worst = max(results, key=lambda r: r["peak_bytes"])
    main = next(r for r in results if r["rank"] == 0)
    return Measurement(
        plan=plan.label(),
        losses=main["losses"],
        step_s=max(r["step_s"] for r in results),
        best_step_s=max(r["best_step_s"] for r in results),
        peak_bytes=worst["peak_bytes"],
        state_bytes=worst["state_bytes"],
        activation_bytes=worst["activation_bytes"],
        gathered_bytes=worst["gathered_bytes"],
        shares=main["shares"],
        real_peak_bytes=max(r["real_peak_bytes"] for r in results),
    )


def _measure_plans(
    rank: int,
    world: int,
    configs: list[dict[str, Any]],
    steps: int,
    profile: bool,
    where: RunDevice,
) -> list[dict[str, Any]]:
    """One worker's part of a smoke run (inside the process group ``run_group`` opened), on
    its device of the run's device type."""
    device = where.torch_device(rank)
    return [_train_and_measure(c, rank, world, steps, profile, device) for c in configs]


def _train_and_measure(
    config: dict[str, Any],
    rank: int,
    world: int,
    steps: int,
    profile: bool,
    device: Any,
) -> dict[str, Any]:
    import torch.distributed as dist

    from xirang.devices.synchronize import synchronizer
    from xirang.planning.memory_peak import RealPeak
    from xirang.planning.meter import SavedTensorMeter, state_bytes
    from xirang_core.contract import RunConfig
    from xirang_core.plugins import get_registry
    from xirang_core.specs import WorkerContext
    from xirang_core.train.init import materialize
    from xirang_core.train.loop import LoopSettings, Trainer
    from xirang_core.train.optim import build_optimizer
    from xirang_core.train.worker import build_model, starts_sharded

    real = RealPeak(device)
    real.start()  # before the model exists: everything from here on is this plan's
    registry = get_registry()
    ctx = WorkerContext(rank, rank, world, device, "", RunConfig(config))
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    strategy = registry.create("parallel", config["parallel"])
    on_meta = starts_sharded(config, ctx, strategy)  # as a worker starts: sharded plans on meta
    model = build_model(config, settings, ctx.device, registry, on_meta)
    ctx.mesh = strategy.build_mesh(ctx)
    wrapped = strategy.wrap(model, ctx)
    if on_meta:
        materialize(model, ctx.device, config["seed"])
    optimizer = build_optimizer(model, config["optim"])
    trainer_cfg, seq_len = config["trainer"], config["data"]["seq_len"]
    micro = trainer_cfg["micro_batch"]
    accum = trainer_cfg["global_batch"] // ctx.data_world // micro
    batches = SyntheticBatches(
        settings["vocab_size"], seq_len, micro, config["seed"], ctx.data_rank, accum
    )
    # the learning-rate schedule spans trainer.max_steps, so a resumed run continues it
    schedule = max(trainer_cfg["max_steps"], steps)
    loop = LoopSettings(
        schedule, accum, micro, seq_len, 1, trainer_cfg["grad_clip"], config["optim"], 0.0, 0.0
    )
    loop.precision = trainer_cfg.get("precision", "fp32")  # as the run computes
    runner = strategy.runner(wrapped)
    trainer = Trainer(wrapped, optimizer, batches, loop, ctx, registry.hook, None, None, runner)
    meter = SavedTensorMeter(wrapped)
    losses, times = [], []
    resume = config.get("smoke", {})
    if resume.get("load"):
        load_state(wrapped, optimizer, resume["load"])
    first = resume.get("first_step", 1)
    wait = synchronizer(device)  # a device's queued work is part of the step
    wrapped.train()
    for step in range(first, first + steps):
        watch = meter.watch() if step - first < METERED_STEPS else contextlib.nullcontext()
        started = time.perf_counter()
        with watch:
            loss = trainer.train_step(step)
        wait()
        times.append(time.perf_counter() - started)  # the loss's all-reduce is not training
        if world > 1:
            dist.all_reduce(loss)
            loss /= ctx.loss_replicas
        losses.append(loss.item())
    real_peak = real.read()["allocated"]
    if resume.get("save"):
        save_state(wrapped, optimizer, resume["save"])
    states = state_bytes(wrapped, optimizer)
    shares = _profile_shares(trainer, steps + 1) if profile else {}
    state_total = sum(states.values())
    return {
        "rank": rank,
        "losses": losses,
        "step_s": statistics.median(_timed(times)),
        "best_step_s": min(_timed(times)),
        "state_bytes": state_total,
        "activation_bytes": meter.peak,
        "gathered_bytes": meter.gathered,
        "peak_bytes": state_total + meter.peak + meter.gathered,
        "real_peak_bytes": real_peak,
        "shares": shares,
    }


def _timed(times: list[float]) -> list[float]:
    """The step times to report: those after the counted steps, or past the warm-up when a
    run is too short to have any."""
    return times[METERED_STEPS:] or times[WARMUP_STEPS:] or times


def save_state(model: Any, optimizer: Any, path: str) -> None:
    """A sharded checkpoint through torch.distributed.checkpoint: each worker writes its
    shards under their whole-model names, so any other split can load it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)


def load_state(model: Any, optimizer: Any, path: str) -> None:
    """Load a :func:`save_state` checkpoint into this worker's split of the model."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    state: dict[str, Any] = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(
        model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
    )


def _profile_shares(trainer: Any, step: int) -> dict[str, float]:
    """Share of one step's wall time in compute, communication and waiting (idle)."""
    from torch.profiler import ProfilerActivity, profile

    started = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        trainer.train_step(step)
    wall = (time.perf_counter() - started) * 1e6
    comm = compute = 0.0
    for event in prof.key_averages():
        name = event.key.lower()
        if any(
            word in name
            for word in (
                "gloo",
                "c10d",
                "all_reduce",
                "allreduce",
                "all_gather",
                "reduce_scatter",
                "send",
                "recv",
                "broadcast",
            )
        ):
            comm += event.self_cpu_time_total
        elif name.startswith("aten::"):
            compute += event.self_cpu_time_total
    compute, comm = min(compute, wall), min(comm, wall - min(compute, wall))
    return {
        k: round(v / wall, 3)
        for k, v in (("compute", compute), ("comm", comm), ("idle", wall - compute - comm))
    }


def as_dict(m: Measurement) -> dict[str, Any]:
    return asdict(m)
