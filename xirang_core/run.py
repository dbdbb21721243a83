"""Assemble one run from the composed config: validate, resolve, place, train, report.

This runs once per run, in the launching process: it creates nothing but the run directory's
``config.yaml`` before handing the job to the scheduler, and every worker reads that file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from xirang_core.config import AUTO, PRECISIONS, compose, validate
from xirang_core.data.tokenizer import resolve_tokenizer
from xirang_core.data.training import resolve_dataset
from xirang_core.errors import ConfigError
from xirang_core.parallel.resolve import resolve_parallel
from xirang_core.plugins import Registry, get_registry
from xirang_core.specs import DeviceBackend, JobSpec
from xirang_core.sweep.prune import join_trial
from xirang_core.train import report, worker


def launch(cfg: DictConfig) -> dict[str, Any]:
    """Train the run ``cfg`` describes; returns its summary."""
    from hydra.core.hydra_config import HydraConfig

    registry = get_registry()
    config = validate(cfg, registry)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    join_trial(config, HydraConfig.get())  # a pruned sweep's trial: where its study is
    config["runtime"] = resolve_runtime(config, registry)
    resolve_dataset(config["data"], config["storage"])  # pin the snapshot once, not per worker
    resolve_tokenizer(config, registry)  # bpe trains here (once per snapshot), never in a worker
    (run_dir / worker.CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))
    trainer = config["trainer"]
    job = JobSpec(str(run_dir), trainer["nproc"], config["project"], trainer["max_restarts"])
    registry.create("scheduler", config["scheduler"]).launch(job, worker.main)
    summary = report.read_summary(run_dir)
    report.print_summary(summary)
    return summary


def compose_config(overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A run's validated config with its runtime resolved (device, backend, measured peak,
    pinned snapshot, prepared tokenizer), as a worker reads it: for benchmarks and notebooks
    that assemble a worker in-process."""
    registry = get_registry()
    config = compose(overrides, registry)
    config["runtime"] = resolve_runtime(config, registry)
    resolve_dataset(config["data"], config["storage"])
    resolve_tokenizer(config, registry)
    return config


def resolve_runtime(config: dict[str, Any], registry: Registry) -> dict[str, Any]:
    """Facts the workers share: the device chosen, its collective backend, its measured peak."""
    nproc = config["trainer"]["nproc"]
    if config["device"]["name"] == AUTO:
        config["device"] = {"name": pick_device(registry)}
    backend: DeviceBackend = registry.create("device", config["device"])
    present, why = backend.detect()
    if not present:
        raise ConfigError(
            f"device={config['device']['name']} is not usable here: {why}. "
            f"Use device=auto to take the best device present."
        )
    inventory = backend.inventory()
    shareable = getattr(backend, "shareable", False)
    if nproc > len(inventory) and not shareable:
        raise ConfigError(
            f"trainer.nproc={nproc} needs {nproc} {backend.type} devices; this machine has "
            f"{len(inventory)}. Use trainer.nproc<={len(inventory)}."
        )
    comm = config["comm"]
    collective = (
        backend.collective_backend()
        if comm["name"] == AUTO
        else registry.create("comm", comm).backend_for(backend.type)
    )
    registry.create("cost", config["cost"]).quote(backend.type, 1, 0.0)  # can it price us?
    threads = config["trainer"]["threads"] or max(1, (os.cpu_count() or 1) // nproc)
    with _torch_threads(threads):
        calibration = backend.calibrate()
        resolve_parallel(config, registry)  # parallel=auto -> a plan; a bad plan stops here
    check_trainer_support(config, backend)
    return {
        "device_type": backend.type,
        "device_model": inventory[0].model,
        "devices": min(nproc, len(inventory)),
        "collective_backend": collective,
        "peak_flops_per_worker": calibration.peak_flops(
            compute_dtype(config["trainer"]["precision"], backend.type, calibration)
        ),
    }


def check_trainer_support(config: dict[str, Any], backend: DeviceBackend) -> None:
    """``trainer.precision`` and ``trainer.compile`` against what the device and the plan can
    do, in the launching process: a ConfigError before any worker starts."""
    from xirang_core.train.compile import compiler_problem

    trainer, device = config["trainer"], config["device"]["name"]
    dtype = PRECISIONS[trainer["precision"]]
    supports = getattr(backend, "supports_dtype", lambda name: name == "float32")
    if not supports(dtype):
        valid = [p for p, d in PRECISIONS.items() if supports(d)]
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


def compute_dtype(precision: str, device_type: str, calibration: Any) -> str:
    """The dtype a run's matmuls compute in, as its calibration names it: an fp32 run on CUDA
    computes in TF32 (the trainer allows it) where the calibration measured that."""
    dtype = PRECISIONS[precision]
    if dtype == "float32" and device_type == "cuda" and "tfloat32" in calibration.matmul_tflops:
        return "tfloat32"
    return dtype


def pick_device(registry: Registry) -> str:
    """The highest-priority device backend whose hardware is present."""
    specs = sorted(
        (registry.spec("device", n) for n in registry.names("device")),
        key=lambda s: -getattr(s, "priority", 0),
    )
    reasons = []
    for spec in specs:
        if spec.missing():
            reasons.append(f"{spec.name}: needs {', '.join(spec.missing())}")
            continue
        try:
            present, why = registry.load("device", spec.name)().detect()
        except Exception as exc:  # detection must never take the run down
            present, why = False, f"{type(exc).__name__}: {exc}"
        if present:
            return spec.name
        reasons.append(f"{spec.name}: {why}")
    raise ConfigError("device=auto found no usable device: " + "; ".join(reasons))


@contextlib.contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
