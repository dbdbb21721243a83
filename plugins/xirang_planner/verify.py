"""``xirang plan --verify``: the chosen plan and the next best, wrapped for real at their world
size on a fake process group and stepped once under fake tensors
(:func:`xirang.planning.measure_plan`), beside what the planner predicted for them: memory per
rank by part, and bytes per step on each mesh dimension. A plan whose measured peak does not
fit the device is dropped and the next one measured, so the plans recommended are ones the
real wrapping fits."""

from __future__ import annotations

from typing import Any

from xirang.planning import ModelShape, ParallelPlan, measure_plan, unmeasured
from xirang_planner.planner import Candidate, Ranking
from xirang_planner.timing import collectives

#: why a tensor-parallel plan measured over the device is kept: its peaks under fake tensors
#: read 8-45x the planner's on 70B and 405B (issue 51), a fault of the measurement not yet found
TP_PEAK_UNTRUSTED = "tensor-parallel peak under fake tensors not trusted yet: kept"

#: what one step of the planner's collectives counts: a micro-batch's phases run per
#: micro-batch, ``step`` once
PER_MICRO = ("forward", "backward")


def predicted_bytes(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, dtype_bytes: int
) -> dict[str, float]:
    """Bytes per step on each mesh dimension the planner's collectives move (each call's
    whole buffer, as :func:`xirang.planning.measure_plan` counts them)."""
    m = plan.micro_batches(global_batch)
    out: dict[str, float] = {}
    for c in collectives(shape, plan, global_batch, dtype_bytes):
        dim = _dim(plan, c.op, c.group, c.stride)
        calls = c.calls * (m if c.phase in PER_MICRO else 1)
        out[dim] = out.get(dim, 0.0) + c.nbytes * calls
    return out


def _dim(plan: ParallelPlan, op: str, group: int, stride: int) -> str:
    if op == "p2p" or stride >= plan.dp * plan.tp:
        return "pp"
    return "tp" if stride == 1 and group == plan.tp else "dp"


def verify(
    config: dict[str, Any],
    shape: ModelShape,
    ranking: Ranking,
    global_batch: int,
    device_bytes: float,
    dtype_bytes: int,
    count: int = 2,
) -> list[dict[str, Any]]:
    """The first ``count`` plans of ``ranking`` whose measured peak fits ``device_bytes``,
    each compared with its prediction; the ones measured that do not fit come first, marked
    ``fits: False`` (they are dropped from the ranking, except a tensor-parallel one, whose
    measured peak is not trusted yet and is only shown with a note). Plans the measurement
    cannot run (:func:`xirang.planning.unmeasured`: pipelines, DDP) are passed over."""
    rows: list[dict[str, Any]] = []
    fitting = 0
    for candidate in [c for c in ranking.candidates if not unmeasured(c.plan)]:
        row = compare(config, shape, candidate, global_batch, dtype_bytes)
        row["fits"] = row["measured"]["peak"] <= device_bytes
        rows.append(row)
        if not row["fits"] and candidate.plan.tp > 1:
            row["note"] = TP_PEAK_UNTRUSTED  # shown, not acted on
        elif not row["fits"]:
            ranking.candidates.remove(candidate)
            ranking.rejected.append((candidate.plan, "measured peak does not fit"))
            continue
        fitting += 1
        if fitting == count:
            break
    return rows


def compare(
    config: dict[str, Any],
    shape: ModelShape,
    candidate: Candidate,
    global_batch: int,
    dtype_bytes: int,
) -> dict[str, Any]:
    """One plan measured at scale beside the planner's figures, with the ratios
    predicted / measured of the peak and of each mesh dimension's bytes."""
    plan = candidate.plan
    run = run_config(config, shape, global_batch, dtype_bytes)
    measured = measure_plan(run, plan).as_dict()
    memory = candidate.memory
    peak = memory.total - memory.runtime - memory.slack  # tensors: what the tracker sees
    bytes_ = predicted_bytes(shape, plan, global_batch, dtype_bytes)
    ratios = {"peak": _ratio(peak, measured["peak"])}
    for dim, nbytes in measured["bytes_per_dim"].items():
        if dim in bytes_:
            ratios[f"bytes_{dim}"] = _ratio(bytes_[dim], nbytes)
    return {
        "plan": plan.label(),
        "predicted": {"memory": memory.as_dict(), "peak": peak, "bytes_per_dim": bytes_},
        "measured": measured,
        "ratio": ratios,
    }


def run_config(
    config: dict[str, Any], shape: ModelShape, global_batch: int, dtype_bytes: int
) -> dict[str, Any]:
    """The run config the plan is for: the shape's sequence, the global batch, and bf16
    compute where the cluster trains in 2-byte elements (``dtype_bytes``)."""
    precision = "bf16" if dtype_bytes == 2 else "fp32"
    trainer = {**config["trainer"], "global_batch": global_batch, "precision": precision}
    data = {**config["data"], "seq_len": shape.seq_len}
    return {**config, "trainer": trainer, "data": data}


def _ratio(predicted: float, measured: float) -> float:
    return round(predicted / measured, 4) if measured else 0.0
