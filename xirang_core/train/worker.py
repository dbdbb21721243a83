"""One worker: read the run's resolved config, assemble the parts from the registry, train.

Every worker (one in-process, or N under the elastic launcher) starts here with the run
directory that the launching process created and filled with ``config.yaml``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist

from xirang_core.checkpoint.pretrained import load_pretrained
from xirang_core.contract import RunConfig
from xirang_core.data.interface import open_dataset
from xirang_core.data.step_loader import loop_batches
from xirang_core.data.tokens import IGNORE, TokenBatches
from xirang_core.devices.cores import (
    OMP_DEFAULTS,
    available_cores,
    busy_warning,
    default_threads,
    host_load,
)
from xirang_core.errors import ConfigError, peer_lost
from xirang_core.faults import RunGuard
from xirang_core.faults.health import local_device
from xirang_core.hookcall import notify
from xirang_core.plugins import Registry, get_registry
from xirang_core.specs import CommBackend, Model, StepRunner, Strategy, Tokenizer, WorkerContext
from xirang_core.train import balance, profile, report
from xirang_core.train.census import agreed_config
from xirang_core.train.compile import compile_model
from xirang_core.train.cost import cost_fields
from xirang_core.train.finish import Finishing
from xirang_core.train.flops_peak import MfuFigure, Peak, device_peak, run_peak_flops, trusted_mfu
from xirang_core.train.init import materialize
from xirang_core.train.interrupt import StopAtStepEnd, stop_on
from xirang_core.train.loop import NO_RUNNER, Companions, LoopSettings, Trainer, evaluate
from xirang_core.train.optim import build_optimizer, build_schedule
from xirang_core.train.runconfig import worker_config
from xirang_core.train.segments import SegmentLog, WholeRun
from xirang_core.train.trainable import Trained, trained_flops

log = logging.getLogger("xirang.devices")

#: how long a worker whose collective broke waits before failing (its peer fails first)
PEER_GRACE_S = 3.0


@dataclass
class Assembly:
    """The parts of one worker, built from the config; the overhead benchmark reuses it."""

    ctx: WorkerContext
    model: torch.nn.Module
    wrapped: torch.nn.Module
    optimizer: torch.optim.Optimizer
    train: TokenBatches
    val: TokenBatches
    settings: LoopSettings
    strategy: Strategy  # the parallel strategy; it may say how its state is checkpointed
    comm: CommBackend | None = None  # the comm option's hooks, when one is installed
    params: int = 0  # the whole model's parameters, counted before a split keeps a stage's
    #: the parameters that train, all of them, and the FLOPs per token a step does with them
    trained: Trained | None = None
    #: threads per worker, the cores the run may use here and the host's load at the start
    host: dict[str, Any] = field(default_factory=dict)
    balancer: balance.Balancer | None = None  # parallel.balance: this rank's unequal share
    #: what of a step the strategy runs itself for ``wrapped`` (a pipeline's whole step)
    runner: StepRunner = NO_RUNNER


def main(run_dir: str, given: Mapping[str, Any] | None = None) -> None:
    """Entry point of every worker process; ``given`` when its launcher resolved the run's
    runtime in the worker itself (Slurm's tasks), else the run directory's config. Either is
    checked against the run's contract first: a bad one is one error naming what is wrong."""
    registry = get_registry()
    config = worker_config(run_dir, registry, given)
    ctx = open_worker(config, run_dir, registry)
    config = ctx.config  # with the comm the ranks agreed on
    try:
        parts = assemble(config, ctx, registry)
        notify(registry.hook, "xirang_on_run_start", ctx=ctx, config=config)
        train_and_report(config, parts, registry)
    except BaseException as exc:
        notify(registry.hook, "xirang_on_fault", tolerate=True, ctx=ctx, error=exc)
        if ctx.world_size > 1 and peer_lost(str(exc)):
            # a symptom of another worker's failure: let that one's error reach the launcher
            # first, so the run's message names the cause
            time.sleep(PEER_GRACE_S)
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def open_worker(config: RunConfig, run_dir: str, registry: Registry) -> WorkerContext:
    """Rank, device and process group for this process."""
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))  # this node's workers
    torch.set_num_threads(config.trainer.threads or default_threads(local_world))
    backend = registry.create("device", config["device"])
    allocator_defaults(backend.torch_type, os.environ)  # before the device's first use reads it
    device = backend.torch_device(local_device(local_rank))  # healthy ones, as placed
    options = group_options(config, device)
    # under the elastic agent even one worker gets a group: a multi-process strategy (DDP)
    # needs one when a restart shrank the run to a single healthy device
    if world_size > 1 or "TORCHELASTIC_RUN_ID" in os.environ:
        store = restart_store(world_size)
        if store is None:
            dist.init_process_group(config["runtime"]["collective_backend"], **options)
        else:  # the ranks' device types decide the group's backend (comm=auto -> mixed)
            config = agreed_config(RunConfig(config), store, rank, local_rank, registry)
            dist.init_process_group(
                config["runtime"]["collective_backend"],
                store=store,
                rank=rank,
                world_size=world_size,
                **options,
            )
    elif registry.spec("parallel", config["parallel"]["name"]).multi_process:
        # one in-process worker of a multi-process strategy (parallel=ddp, trainer.nproc=1):
        # a group of one, as torchrun --nproc-per-node=1 would give it, with no rendezvous
        backend_name = config["runtime"]["collective_backend"]
        dist.init_process_group(
            backend_name, store=dist.HashStore(), rank=0, world_size=1, **options
        )
    return WorkerContext(rank, local_rank, world_size, device, run_dir, config)


#: the CUDA caching allocator's setting xirang's workers start with, unless the user set one
CUDA_ALLOC_CONF = "expandable_segments:True"


def allocator_defaults(torch_type: str, environ: MutableMapping[str, str]) -> None:
    """Expandable segments for a CUDA worker (torchtitan's default too): the allocator grows
    one mapping instead of caching fixed blocks, so changing activation sizes (a last
    partial batch, evaluation, checkpoint staging) do not fragment memory into
    out-of-memory errors with gigabytes reserved but free. Read when CUDA starts in the
    process, so set before the worker's first device call; a setting of the user's in
    either variable (``PYTORCH_CUDA_ALLOC_CONF``, or torch's newer ``PYTORCH_ALLOC_CONF``)
    stays as it is. ROCm builds are left alone."""
    if torch_type != "cuda" or torch.version.hip is not None:
        return
    if "PYTORCH_CUDA_ALLOC_CONF" in environ or "PYTORCH_ALLOC_CONF" in environ:
        return
    environ["PYTORCH_CUDA_ALLOC_CONF"] = CUDA_ALLOC_CONF


def group_options(config: RunConfig, device: torch.device) -> dict[str, Any]:
    """``init_process_group``'s timeout (``trainer.comm_timeout_s``: a collective stuck on a
    lost peer fails the run after it, not torch's 30 minutes) and, for a CUDA worker, its
    ``device_id``: NCCL then forms the communicator at once, on that device (not at the
    first collective, on whichever device is current), and splits sub-groups from it."""
    options: dict[str, Any] = {"timeout": timedelta(seconds=config.trainer.comm_timeout_s)}
    if device.type == "cuda":
        options["device_id"] = device
    return options


def restart_store(world_size: int) -> Any:
    """Under the elastic agent, its store with a prefix per restart attempt; None otherwise.

    The agent keeps one store across restarts, and process groups publish their peers'
    addresses under fixed keys in it: a restarted worker could read an address a dead peer left
    behind and fail (or hang) connecting. A fresh prefix per attempt keeps the keys apart."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return None
    agent = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size, is_master=False
    )
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return dist.PrefixStore(f"/xirang/attempt_{attempt}", agent)


def assemble(config: RunConfig, ctx: WorkerContext, registry: Registry) -> Assembly:
    trainer, data = config.trainer, config["data"]
    model_settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    strategy = registry.create("parallel", config["parallel"])
    on_meta = starts_sharded(config, ctx, strategy)  # never with model.pretrained
    model = build_model(config, model_settings, ctx.device, registry, on_meta)
    load_pretrained(model, config, registry)  # model.pretrained=<dir>: before any split
    family = cast(Model, model)  # the family's own members, beside nn.Module's
    flops_per_token = family.flops_per_token(data["seq_len"])  # of the whole model, not a split
    params = family.num_params()  # likewise: a pipeline stage keeps only its own layers
    base = list(model.parameters())
    family.after_weights()  # adapters over the weights, which may freeze
    trained = trained_flops(model, base, params, flops_per_token)  # no frozen weight grads
    ctx.mesh = strategy.build_mesh(ctx)
    if not strategy.compiles:  # xirang_torch's compile between their wraps
        compile_model(model, config)
    wrapped = strategy.wrap(model, ctx)
    if on_meta:  # the strategy sharded the empty model: each worker draws its own shards
        materialize(model, ctx.device, config["seed"])
    comm, sync = config["comm"], None
    if comm["name"] != "auto":
        sync = registry.create("comm", comm)
        sync.install_hooks(wrapped, ctx)
    micro = trainer.micro_batch
    seq_len = data["seq_len"]
    max_len = model_settings.get("max_seq_len", seq_len)
    if seq_len > max_len:
        raise ConfigError(f"data.seq_len={seq_len} exceeds model.max_seq_len={max_len}")
    accum = micro_batches(trainer.global_batch, ctx.data_world, micro)
    dataset = open_dataset(config, registry)
    train, val = dataset.batches(config, ctx.data_rank, ctx.data_world, micro, accum)
    balancer = balance.for_run(config, ctx)
    if balancer is not None:
        balance.begin(balancer, config, wrapped, train)
    train = loop_batches(train, trainer.max_steps, data.get("num_workers", 0))
    settings = LoopSettings(
        max_steps=trainer.max_steps,
        accum_steps=accum,
        micro_batch=micro,
        seq_len=seq_len,
        log_every=trainer.log_every,
        gc_every=trainer.gc_every,
        grad_clip=trainer.grad_clip,
        optim=config["optim"],
        flops_per_token=trained.flops_per_token,
        peak_flops=run_peak_flops(config["runtime"], ctx.world_size),
        bytes_per_token=train.bytes_per_token,
        precision=trainer.precision,
        compile=trainer.compile,
        eval_every=trainer.eval_every,
        eval_batches=trainer.eval_batches,
        nonfinite=trainer.nonfinite,
        schedule=build_schedule(config.get("schedule")),
    )
    return Assembly(
        host=host_figures(ctx),
        ctx=ctx,
        model=model,
        wrapped=wrapped,
        # a strategy that must wrap the optimizer with the model (Colossal-AI's Booster) made it
        optimizer=strategy.optimizer or build_optimizer(model, config["optim"]),
        train=train,
        val=val,
        settings=settings,
        comm=sync,
        strategy=strategy,
        params=params,
        trained=trained,
        balancer=balancer,
        runner=strategy.runner(wrapped),
    )


def host_figures(ctx: WorkerContext) -> dict[str, Any]:
    """The threads this worker computes with, the cores the run may use on this host, how its
    OpenMP threads wait and the host's load average now; the main worker warns when other
    work leaves the run fewer cores than it was given (steps then run slower and vary, which
    nothing else would explain)."""
    cores, load = available_cores(), host_load()
    on_cpu = ctx.device.type == "cpu" and ctx.local_rank == 0
    problem = busy_warning(load, cores) if on_cpu else None
    if problem:
        log.warning("device=cpu: %s", problem)
    waits = {k: os.environ[k] for k in ("OMP_WAIT_POLICY", *OMP_DEFAULTS) if k in os.environ}
    return {
        "threads": torch.get_num_threads(),
        "cores": cores,
        "omp_wait": " ".join(f"{k}={v}" for k, v in waits.items()),
        "host_load_start": load,
    }


def micro_batches(global_batch: int, data_world: int, micro: int) -> int:
    """Micro-batches each data-parallel rank runs per step; at least one, or the run would
    log a loss of 0 over 0 tokens at every step (a config composed for fewer workers than
    joined the group, as every process under torchrun once did)."""
    accum = global_batch // data_world // micro
    if accum < 1:
        raise ConfigError(
            f"trainer.global_batch={global_batch} over {data_world} data-parallel ranks of "
            f"trainer.micro_batch={micro} leaves no micro-batch per step for this worker; "
            f"the config was resolved for a different worker count than joined the group. "
            f"Use a global_batch that is a multiple of {data_world * micro}."
        )
    return accum


def starts_sharded(config: Mapping[str, Any], ctx: WorkerContext, strategy: Strategy) -> bool:
    """Whether the model is built on the meta device and materialised only after the strategy
    sharded it (FSDP2: each worker then holds its shards plus one whole parameter at a time,
    so a model too large for one worker starts). Pretrained weights load into a whole model."""
    return strategy.shards_parameters(ctx) and not config["model"].get("pretrained")


def build_model(
    config: Mapping[str, Any],
    settings: dict[str, Any],
    device: Any,
    registry: Registry,
    on_meta: bool,
) -> torch.nn.Module:
    """The configured model from its ``settings``: initialised on ``device``, or without
    storage on the meta device (``on_meta``) for :func:`materialize` to fill once sharded."""
    torch.manual_seed(config["seed"])
    family = registry.load("model", config["model"]["family"])
    if on_meta:
        with torch.device("meta"):
            return cast(torch.nn.Module, family.from_config(settings))
    return cast(torch.nn.Module, family.from_config(settings)).to(device)


def train_and_report(config: RunConfig, parts: Assembly, registry: Registry) -> None:
    ctx = parts.ctx
    run_dir = Path(ctx.run_dir)
    segment = SegmentLog(run_dir)  # this start of the workers: one segment of the run
    metrics = report.MetricsLog(run_dir, segment.number) if ctx.is_main else None
    started = time.perf_counter()
    guard = RunGuard.open(config, parts, registry)  # resumes from the latest checkpoint
    companions = Companions(
        evaluate=lambda: held_out_loss(parts),
        recovery=guard.recovery_note,
        figures=guard.figures,
        profiler=profile.for_run(config, ctx.rank, ctx.device, ctx.run_dir),
    )
    trainer = Trainer(
        parts.wrapped,
        parts.optimizer,
        parts.train,
        parts.settings,
        ctx,
        registry.hook,
        metrics,
        parts.balancer,
        parts.runner,
        companions,
    )
    if ctx.is_main:
        segment.begin(guard.start_step, parts.settings.peak_flops)
    # SIGTERM (preemption, scancel) or Ctrl-C: checkpoint at the step's end and stop
    with stop_on(), segment.closing_on_stop(trainer, started, ctx.is_main):
        trainer.fit(guard.start_step, on_step_end=StopAtStepEnd(guard, ctx))
    last_step = trainer.pruned_at or parts.settings.max_steps  # a pruned trial ends early
    sample_tokens = config.trainer.sample_tokens
    finishing = Finishing(ctx.is_main, parts.settings.eval_batches, sample_tokens)
    with finishing.part("checkpoint"):
        guard.finish(last_step)
    wall = time.perf_counter() - started
    with finishing.part("validation"), trainer.precision.autocast():
        val_loss = final_loss(trainer, parts, last_step)
        val_bytes = held_out_bytes_per_token(parts)
    with finishing.part("sample"), trainer.precision.autocast():
        # a model the guard could not save (weights already non-finite) has nothing to say;
        # a replicated model samples on the main worker only
        samples = math.isfinite(val_loss) and (ctx.is_main or split_model(parts))
        sample = final_sample(config, parts) if samples else ""
    if not ctx.is_main:
        return
    with finishing.part("report"):
        figures = loop_figures(trainer)
        segment.end(last_step, wall, figures["compile_s"], figures["compile_steps"])
        whole = segment.whole_run()  # every segment's records: the loss curve of the whole run
        whole.records[-1]["val_loss"] = round(val_loss, 5)
        summary = summarize(config, parts, whole, registry, figures, val_bytes)
        summary["sample"] = sample
        title = f"{config['model']['name']} loss"
        report.plot_loss(whole.records, run_dir / report.PLOT_FILE, title)
        report.write_summary(run_dir, summary)
    finishing.done()
    notify(registry.hook, "xirang_on_run_end", ctx=ctx, summary=summary)


def final_loss(trainer: Trainer, parts: Assembly, last_step: int) -> float:
    """The held-out loss at ``last_step``: the loop's evaluation of that step (every worker
    took it, so every worker skips it alike), else scored now."""
    evaluated = trainer.evaluated
    if evaluated is not None and evaluated[0] == last_step:  # alike on every worker
        return math.nan if evaluated[1] is None else evaluated[1]
    return held_out_loss(parts)  # every worker scores its stride of the rows


def held_out_loss(parts: Assembly) -> float:
    """The validation loss over the same held-out rows whatever the worker count: the first
    ``trainer.eval_batches`` global batches, each data-parallel rank scoring its stride of them (its
    slice of every batch, as it trains), the means averaged over every worker. A split model
    evaluates on every worker together (their forwards exchange shards)."""
    ctx = parts.ctx
    split = split_model(parts)
    evaluated = parts.wrapped if split else trained_model(parts)
    runner = parts.runner if split else NO_RUNNER
    # a pipeline's evaluation runs a whole step's micro-batches per schedule run
    count = parts.settings.eval_batches
    batches = count if runner.evaluate is not None else count * parts.settings.accum_steps
    loss = evaluate(evaluated, parts.val, ctx.device, batches, runner)
    return mean_over_workers(loss, ctx)


#: what a decoder puts where bytes do not form a character
REPLACEMENT = "\ufffd"


def held_out_bytes_per_token(parts: Assembly) -> float:
    """UTF-8 bytes per scored token of the held-out rows :func:`held_out_loss` scores, over
    every worker: their targets decoded to text (an end-of-document token has no bytes). Bits
    per byte divide by these, as lm-eval's ``bits_per_byte`` divides by the evaluated texts'
    own bytes: the training corpus's average would put another text's loss on its scale."""
    tokenizer = parts.val.tokenizer
    tokens = text = 0
    for i in range(parts.settings.eval_batches * parts.settings.accum_steps):
        for row in parts.val.get(i)[1].tolist():
            ids = [t for t in row if t != IGNORE]
            tokens += len(ids)
            text += text_bytes(tokenizer.decode(ids))
    counts = torch.tensor([tokens, text], dtype=torch.float64, device=parts.ctx.device)
    if parts.ctx.world_size > 1 and dist.is_initialized():  # ranks alike in rows count alike
        dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return counts[1].item() / counts[0].item() if counts[0].item() else 0.0


def text_bytes(text: str) -> int:
    """The UTF-8 bytes ``text`` was decoded from. A row's edges can cut a character's bytes
    apart, and each piece decodes to one U+FFFD (three bytes): it counts as one byte, the
    piece's usual length (a lone continuation byte at a row's start)."""
    return len(text.encode("utf-8")) - 2 * text.count(REPLACEMENT)


def mean_over_workers(value: float, ctx: WorkerContext) -> float:
    """``value`` averaged over every worker. Each scored as many equal batches, so this is the
    mean over all of them; workers holding the same rows (a tensor-parallel group, a
    pipeline's stages) count alike, which leaves the mean over the data ranks unchanged."""
    if ctx.world_size == 1 or not dist.is_initialized():
        return value
    total = torch.tensor([value], dtype=torch.float32, device=ctx.device)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / ctx.world_size


def split_model(parts: Assembly) -> bool:
    """Whether the workers hold parts of one model (a mesh's split, or a strategy that splits
    with its own groups, such as Colossal-AI's hybrid_parallel), so that evaluating and
    sampling it take every worker together."""
    return parts.ctx.mesh is not None or parts.strategy.splits_model


def trained_model(parts: Assembly) -> torch.nn.Module:
    """The module training changes: the model, or the strategy's stand-in for it
    (hybrid_parallel trains the Llama's Hugging Face twin and leaves the model untouched)."""
    return parts.strategy.trained or parts.model


def final_sample(config: RunConfig, parts: Assembly) -> str:
    """The trained model's continuation of the prompt. Sampling feeds growing prompts: a
    pipeline's stages and sequence parallel's even sequence shards take fixed shapes only, and
    compiled blocks run eager here rather than compile once per prompt length."""
    if parts.runner.step is not None or config["parallel"].get("sp", False):
        return ""
    stance = torch.compiler.set_stance("force_eager") if config.trainer.compile else None
    with stance or contextlib.nullcontext():
        tokenizer = parts.train.tokenizer
        return sample_text(trained_model(parts), config["trainer"], parts.ctx.device, tokenizer)


def loop_figures(trainer: Trainer) -> dict[str, Any]:
    """The loop's own figures for the summary: compile time, the steps the guard skipped and
    the step a sweep's pruner stopped the run at."""
    return {
        "compile_s": round(trainer.compile_s, 3),
        "compile_steps": trainer.compile_steps,
        "skipped_steps": trainer.skipped_steps,
        "pruned_at": trainer.pruned_at,  # None unless a sweep's pruner ended the run early
    }


def summarize(
    config: RunConfig,
    parts: Assembly,
    whole: WholeRun,
    registry: Registry,
    figures: dict[str, Any] | None = None,
    val_bytes_per_token: float = 0.0,
) -> dict[str, Any]:
    """The summary of the whole run, across its segments (resumes, restarts); tokens/s and
    MFU leave out the steps that compiled; bits per byte per the held-out texts' own bytes
    (``val_bytes_per_token``, 0: unknown)."""
    figures = {**(figures or {"skipped_steps": 0}), **whole.compile_figures()}
    records = whole.records
    first, last = records[0], records[-1]
    runtime = config["runtime"]
    tokens = last["tokens"]
    per_step = tokens / max(last["step"], 1)
    tokens_per_s = whole.tokens_per_s(per_step)
    checked = checked_mfu(config, whole.mfu(per_step, parts.settings.flops_per_token), registry)
    peak = parts.settings.peak_flops * checked.peak_flops_per_worker
    peak /= runtime["peak_flops_per_worker"] or 1.0
    policy = registry.create("cost", config["cost"])
    quote = whole.cost(lambda s: policy.quote(runtime["device_type"], runtime["devices"], s))
    wall = whole.wall_s
    return {
        "run_dir": parts.ctx.run_dir,
        "project": config["project"],
        "model": config["model"]["name"],
        "params": parts.params or cast(Model, parts.model).num_params(),
        **trained_fields(parts.trained),
        "steps": last["step"],
        "tokens": tokens,
        "global_batch": config.trainer.global_batch,
        "micro_batch": parts.settings.micro_batch,
        "grad_accum": parts.settings.accum_steps,
        "first_loss": first["loss"],
        "final_loss": last["loss"],
        "val_loss": last["val_loss"],
        "val_bpb": report.bits_per_byte(last["val_loss"], val_bytes_per_token),
        "tokenizer": config["tokenizer"]["name"],
        "bytes_per_token": round(parts.settings.bytes_per_token, 5),
        "val_bytes_per_token": round(val_bytes_per_token, 5),
        "loss_drop_pct": round(100 * (1 - last["loss"] / first["loss"]), 2),
        "lr": config.optim.lr,  # what a diverged run's hint suggests a tenth of
        "tokens_per_s": round(tokens_per_s, 1),
        "mfu": round(checked.mfu, 5),
        "peak_tflops": round(peak / 1e12, 4),
        "peak_source": checked.source,
        **({"mfu_note": checked.note} if checked.note else {}),
        "wall_time_s": round(wall, 3),
        "restarts": whole.restarts,
        **figures,
        "precision": config.trainer.precision,
        "world_size": parts.ctx.world_size,
        "data_snapshot": config["data"].get("snapshot", ""),
        "data_tokens": parts.train.tokens_seen(last["step"]),  # per source, inputs
        "device": runtime["device_model"],
        **parts.host,
        "host_load_end": host_load(),
        **cost_fields(
            tokens,
            first["loss"] - last["loss"],
            quote.amount,
            quote.currency,
            config["cost"]["name"],
        ),
        **comm_report(parts, last["step"]),
        **balance.summary_fields(last),
    }


def trained_fields(trained: Trained | None) -> dict[str, int]:
    """``trainable_params`` and ``total_params`` when some weights are frozen (LoRA), which
    the summary shows beside the model's size."""
    if trained is None or trained.trainable >= trained.total:
        return {}
    return {"trainable_params": trained.trainable, "total_params": trained.total}


def checked_mfu(config: RunConfig, mfu: float, registry: Registry) -> MfuFigure:
    """The run's MFU against a peak it did not beat (:func:`trusted_mfu`): the device's peak
    measured again, in this worker with its threads, when it did."""
    runtime = config["runtime"]

    def remeasure() -> Peak:
        backend = registry.create("device", config["device"])
        calibration = backend.calibrate(refresh=True)
        accelerator = not backend.shareable
        dtype = runtime.get("peak_dtype", "float32")
        return device_peak(calibration, dtype, runtime["device_model"], accelerator)

    return trusted_mfu(mfu, runtime, remeasure)


def comm_report(parts: Assembly, steps: int) -> dict[str, Any]:
    """The comm option's bytes on the wire and hidden communication (main worker's view)."""
    report = parts.comm.report(steps) if parts.comm and parts.ctx.world_size > 1 else None
    return {"comm": report} if report is not None else {}


def sample_text(
    model: torch.nn.Module, trainer: dict[str, Any], device: Any, tokenizer: Tokenizer
) -> str:
    """A short continuation of ``trainer.sample_prompt``, encoded and decoded with the run's
    tokenizer (ids past its vocabulary, which a padded model can draw, are dropped)."""
    if trainer["sample_tokens"] <= 0:
        return ""
    torch.manual_seed(0)
    prompt = torch.tensor([tokenizer.encode(trainer["sample_prompt"])], device=device)
    out = cast(Model, model).generate(prompt, trainer["sample_tokens"])
    return tokenizer.decode(out[0].tolist())
