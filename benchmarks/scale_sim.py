"""Plans at cluster scale without the cluster: Llama 3 8B, 70B and 405B wrapped for real on
torch's fake process group of 8 to 2,048 ranks, one step under fake tensors each
(:func:`xirang.planning.measure_plan`), against the planner's memory and traffic.

Each configuration is one torchtitan runs on H100s (bf16 compute, fp32 reduction, FSDP2 over
``dp``, tensor and sequence parallel over ``tp`` inside a node of 8, sequence 8192, full
activation checkpointing except where named). Pipeline plans are not measured under fake
tensors (their stages exchange shapes with real values), so the 405B plans are the FSDP+TP
ones torchtitan also runs. Per configuration: the measured peak memory of rank 0 and the
planner's, and the bytes per step on each mesh dimension, measured and planned, with their
ratios (planned / measured).

Published figure beside it: torchtitan's docs/performance.md, Table 1 (Llama 3.1 8B, 8 H100,
FSDP, local batch 2, selective activation checkpointing, eager): 82.4 GiB per GPU,
https://github.com/pytorch/torchtitan/blob/main/docs/performance.md . The row ``8b-8-mb2``
runs that configuration (with selective recompute planned as none, the planner's bound).

    python benchmarks/scale_sim.py                  # every configuration that finishes here
    python benchmarks/scale_sim.py 8b-8 70b-64      # some
Last line: ``peak_ratio_min=<x> peak_ratio_max=<y> bytes_ratio_min=<x> bytes_ratio_max=<y>
configs=<measured>``.
"""

from __future__ import annotations

import argparse
import time

from xirang_planner.memory import predict_memory
from xirang_planner.verify import predicted_bytes, run_config

from xirang.planning import ParallelPlan, compose, measure_plan, model_shape
from xirang_core.plugins import get_registry

#: name -> (model option, data-parallel, tensor-parallel, micro-batch, recompute)
CONFIGS = {
    "8b-8-mb2": ("llama3_8b", 8, 1, 2, "none"),
    "8b-8": ("llama3_8b", 8, 1, 1, "full"),
    "8b-64": ("llama3_8b", 64, 1, 1, "full"),
    "70b-64": ("llama3_70b", 8, 8, 1, "full"),
    "70b-256": ("llama3_70b", 32, 8, 1, "full"),
    "405b-512": ("llama3_405b", 64, 8, 1, "full"),
    "405b-2048": ("llama3_405b", 256, 8, 1, "full"),
}
#: published peak memory per GPU, GiB, with its source (module docstring)
PUBLISHED = {"8b-8-mb2": 82.4}
SEQ = 8192
GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    args = parser.parse_args()
    peaks, moved = [], []
    for name in args.configs:
        peak, ratios = run(name)
        peaks.append(peak)
        moved += ratios
    print(
        f"peak_ratio_min={min(peaks):.3f} peak_ratio_max={max(peaks):.3f} "
        f"bytes_ratio_min={min(moved):.3f} bytes_ratio_max={max(moved):.3f} "
        f"configs={len(peaks)}"
    )


def run(name: str) -> tuple[float, list[float]]:
    """One configuration measured and planned; prints its row, returns the ratios."""
    option, dp, tp, micro, recompute = CONFIGS[name]
    registry = get_registry()
    config = compose([f"model={option}", f"data.seq_len={SEQ}"], registry)
    shape = model_shape(config, registry)
    assert shape is not None
    plan = ParallelPlan(dp, tp, 1, tp > 1, 3, micro, recompute)
    global_batch = dp * micro
    started = time.perf_counter()
    measured = measure_plan(run_config(config, shape, global_batch, 2), plan)
    predicted = predict_memory(shape, plan, global_batch, compute_bytes=2)
    planned_peak = predicted.total - predicted.runtime - predicted.slack
    peak_ratio = planned_peak / measured.peak
    planned_bytes = predicted_bytes(shape, plan, global_batch, 2)
    dims, ratios = [], []
    for dim, nbytes in sorted(measured.bytes_per_dim().items()):
        if nbytes < 2**20:  # the loss and gradient-norm all-reduces: bytes, not traffic
            continue
        planned = planned_bytes.get(dim, 0.0)
        ratios.append(planned / nbytes)
        dims.append(f"{dim} {nbytes / GIB:.2f}/{planned / GIB:.2f} GiB ({planned / nbytes:.3f})")
    published = PUBLISHED.get(name)
    against = f", published {published} GiB" if published else ""
    print(
        f"{name} {plan.label()} ranks={plan.world}: peak {measured.peak / GIB:.2f} GiB measured, "
        f"{planned_peak / GIB:.2f} planned ({peak_ratio:.3f}){against}; bytes/step measured/"
        f"planned: {'; '.join(dims)}; {time.perf_counter() - started:.0f} s here",
        flush=True,
    )
    return peak_ratio, ratios


if __name__ == "__main__":
    main()
