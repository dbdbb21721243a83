"""Assemble one run from the composed config: validate, resolve, place, train, report.

This runs once per run, in the launching process: it creates nothing but the run directory's
``config.yaml`` before handing the job to the scheduler, and every worker reads that file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from xirang_core.config import AUTO, PRECISIONS, compose, validate
from xirang_core.contract import RunConfig
from xirang_core.data.interface import apply_pins, open_dataset, with_runtime
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.devices.choice import collective_for, pick_device
from xirang_core.devices.cores import available_cores, default_threads
from xirang_core.errors import ConfigError
from xirang_core.parallel.resolve import resolve_parallel
from xirang_core.plugins import Registry, get_registry
from xirang_core.specs import DeviceBackend, JobSpec, Runtime
from xirang_core.sweep.prune import join_trial
from xirang_core.train import report, resume, torchrun, worker
from xirang_core.train.compile import compiler_problem
from xirang_core.train.flops_peak import concurrent_workers, device_peak
from xirang_core.train.profile import print_top_operators
from xirang_core.train.runconfig import write_config

log = logging.getLogger("xirang.devices")


def launch(cfg: DictConfig, config: RunConfig | None = None) -> dict[str, Any]:
    """Train the run ``cfg`` describes; returns its summary. ``config``: ``cfg`` already
    validated (the command line validates before the run's modules load): not again."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    registry = get_registry()
    config = validate(cfg, registry) if config is None else config
    caution = warmup_caution(config["optim"], config["trainer"]["max_steps"])
    if caution:
        logging.getLogger("xirang.run").warning("%s", caution)
    hydra = HydraConfig.get()
    sweeping = hydra.mode == RunMode.MULTIRUN
    # an interrupted run of this config continues in its own directory (checkpoint.resume=auto)
    run_dir = resume.run_dir_for(config, Path(hydra.runtime.output_dir), sweeping)
    key = resume.config_key(config)
    config = join_trial(config, hydra)  # a pruned sweep's trial: where its study is
    if not resolves_remotely(config, registry):  # else where the workers run (Slurm's nodes)
        config = resolve_runtime(config, registry)
    config = prepare_data(config, registry)
    found = torchrun.world()
    if found:  # torchrun is the scheduler: this process is rank 0's worker
        summary = train_as_rank_zero(config, run_dir, found, key)
    else:
        summary = train_in(config, run_dir, registry, key)
    if not summary:  # a detached scheduler: the job runs elsewhere
        return summary
    report.print_summary(summary)
    print_top_operators(run_dir)  # trainer.profile: the main worker's top operators
    return summary


def warmup_caution(optim: Mapping[str, Any], max_steps: int) -> str | None:
    """Why the run will never train at ``optim.lr``: its warm-up (linear from 0) is longer
    than the run, so every step trains at a fraction of the rate asked for, silently
    (``optim.warmup_steps=500 trainer.max_steps=20`` ends at 4% of it). None when it fits."""
    warm = optim["warmup_steps"]
    if warm <= max_steps:
        return None
    return (
        f"optim.warmup_steps={warm} is longer than the run (trainer.max_steps={max_steps}): "
        f"the learning rate climbs only to {max_steps / warm:.0%} of optim.lr={optim['lr']:g} "
        f"by the last step; use optim.warmup_steps={max(1, max_steps // 10)} (a tenth of the "
        f"run) or a longer run"
    )


def train_in(
    config: RunConfig, run_dir: Path, registry: Registry, key: str | None = None
) -> dict[str, Any]:
    """Train a resolved config in ``run_dir`` through its scheduler; returns the summary (the
    plugin test kit calls this with :func:`compose_config`'s result). With the config's ``key``
    (:func:`resume.config_key`) a stop leaves the run for the same command to resume."""
    write_config(config, run_dir)
    trainer = config["trainer"]
    nodes = {k: trainer[k] for k in ("nnodes", "node_rank", "rdzv_endpoint")}
    job = JobSpec(
        str(run_dir), trainer["nproc"], config["project"], trainer["max_restarts"], **nodes
    )
    scheduler = registry.create("scheduler", config["scheduler"])
    stopping = resume.resumable(run_dir, key) if key else contextlib.nullcontext()
    with stopping:  # a stop leaves the run resumable and says how
        scheduler.launch(job, worker.main)
    if scheduler.detached:  # submitted elsewhere; it said how to follow it
        return {}
    return report.read_summary(run_dir)


def train_as_rank_zero(
    config: RunConfig, run_dir: Path, found: torchrun.World, key: str
) -> dict[str, Any]:
    """Under torchrun: write the run's config, name its directory to the other ranks, train
    as rank 0's worker in this process; returns the summary."""
    write_config(config, run_dir)
    torchrun.announce(found, run_dir)
    with resume.resumable(run_dir, key):
        worker.main(str(run_dir))
    return report.read_summary(run_dir)


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """A run's validated config with its runtime resolved (device, backend, measured peak,
    pinned snapshot, prepared tokenizer), as a worker reads it: for benchmarks and notebooks
    that assemble a worker in-process."""
    registry = get_registry()
    config = resolve_runtime(compose(overrides, registry), registry)
    return prepare_data(config, registry)


def prepare_data(config: RunConfig, registry: Registry) -> RunConfig:
    """The launch's one preparation of the data, never a worker's: the dataset pins what the
    run trains on, the tokenizer is prepared on it (bpe trains here, once per snapshot), and
    the dataset pins its tokens; the config returned (config.yaml) tells every worker what was
    pinned."""
    dataset = open_dataset(config, registry)
    config = apply_pins(config, dataset.prepare(config))
    return resolve_tokenizer(config, registry, dataset)[1]


def resolves_remotely(config: RunConfig, registry: Registry) -> bool:
    """Whether the run's scheduler resolves the runtime (device, backend, calibration) on the
    nodes its workers run on: a login node may have no such device, or another one."""
    return registry.load("scheduler", config["scheduler"]["name"]).resolves_runtime


def resolve_runtime(config: RunConfig, registry: Registry) -> RunConfig:
    """The config the workers share: ``device=auto`` and ``parallel=auto`` resolved, and the
    :class:`Runtime` facts (the device chosen, its collective backend, its measured peak) in
    its ``runtime`` section."""
    nproc = config["trainer"]["nproc"]
    if config["device"]["name"] == AUTO:
        config = config.replace(device={"name": pick_device(registry)})
    backend: DeviceBackend = registry.create("device", config["device"])
    present, why = backend.detect()
    if not present:
        raise ConfigError(
            f"device={config['device']['name']} is not usable here: {why}. "
            f"Use device=auto to take the best device present."
        )
    for caveat in backend.caveats():
        log.warning("device=%s: %s", backend.type, caveat)
    inventory = backend.inventory()
    shareable = backend.shareable
    if nproc > len(inventory) and not shareable:
        raise ConfigError(
            f"trainer.nproc={nproc} needs {nproc} {backend.type} devices; this machine has "
            f"{len(inventory)}. Use trainer.nproc<={len(inventory)}."
        )
    collective = collective_for(config, registry, backend)
    registry.create("cost", config["cost"]).quote(backend.type, 1, 0.0)  # can it price us?
    threads = config["trainer"]["threads"] or default_threads(nproc)
    with _torch_threads(threads):
        calibration = backend.calibrate()
        config = resolve_parallel(config, registry)  # parallel=auto -> a plan; a bad plan stops
    check_trainer_support(config, backend)
    slow = slower_precision(config["trainer"]["precision"], calibration.matmul_tflops)
    if slow:
        log.warning("device=%s: %s", backend.type, slow)
    dtype = compute_dtype(config["trainer"]["precision"], backend.type, calibration)
    peak = device_peak(calibration, dtype, inventory[0].model, accelerator=not shareable)
    runtime = Runtime(
        device_type=backend.type,
        device_model=inventory[0].model,
        devices=min(nproc, len(inventory)),
        collective_backend=collective,
        peak_flops_per_worker=peak.flops,
        peak_source=peak.source,  # a datasheet, or the best measurement and its load
        peak_dtype=dtype,
        concurrent_workers=concurrent_workers(nproc, threads, available_cores(), shareable),
    )
    return with_runtime(config, **runtime.entries())


def check_trainer_support(config: RunConfig, backend: DeviceBackend) -> None:
    """``trainer.precision`` and ``trainer.compile`` against what the device and the plan can
    do, in the launching process: a ConfigError before any worker starts."""

    trainer, device = config["trainer"], config["device"]["name"]
    dtype = PRECISIONS[trainer["precision"]]
    if not backend.supports_dtype(dtype):
        valid = [p for p, d in PRECISIONS.items() if backend.supports_dtype(d)]
        raise ConfigError(
            f"trainer.precision={trainer['precision']}: device={device} cannot compute in "
            f"{dtype} here; valid on this device: {', '.join(valid)}"
        )
    if trainer["precision"] == "fp16" and config["parallel"].get("pp", 1) > 1:
        raise ConfigError(
            "trainer.precision=fp16 needs a gradient scaler, which a pipeline schedule "
            "(parallel.pp>1) does not apply; use trainer.precision=bf16 or fp32"
        )
    problem = compiler_problem(backend.type) if trainer["compile"] else None
    if problem:
        raise ConfigError(f"trainer.compile=true cannot work on device={device}: {problem}")


def slower_precision(precision: str, matmul_tflops: Mapping[str, float]) -> str | None:
    """Why a 16-bit ``trainer.precision`` will train slower than fp32 here, by the device's
    calibration, else None. A CPU without bf16 kernels (no AVX-512 BF16, no AMX) still runs
    bf16 autocast, emulated, 5 to 70 times slower than fp32: valid, so a warning, not an error,
    but a user who asked for bf16 to go faster should hear it before the run is slow."""
    dtype, fp32 = PRECISIONS[precision], matmul_tflops.get("float32")
    measured = matmul_tflops.get(dtype)
    if dtype == "float32" or not fp32 or not measured or measured >= fp32:
        return None
    return (
        f"trainer.precision={precision}: {dtype} matmuls measured {measured:.3g} TFLOP/s here "
        f"against {fp32:.3g} in float32 (no fast {dtype} path on this device), so "
        f"trainer.precision=fp32 will train faster"
    )


def compute_dtype(precision: str, device_type: str, calibration: Any) -> str:
    """The dtype a run's matmuls compute in, as its calibration names it: an fp32 run on CUDA
    computes in TF32 (the trainer allows it) where the calibration measured that."""
    dtype = PRECISIONS[precision]
    if dtype == "float32" and device_type == "cuda" and "tfloat32" in calibration.matmul_tflops:
        return "tfloat32"
    return dtype


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
