"""``xirang plan`` on a mixed cluster: the plan the mixed planner found, each device type alone
for comparison (the better of the uniform planner's even splits and an uneven pipeline), the
predicted speedup, and why nothing fits when nothing does."""

from __future__ import annotations

from typing import Any

from xirang.planning import ModelShape, ParallelPlan, PlanError
from xirang_planner.clusters import MixedCluster
from xirang_planner.memory import stage_memory
from xirang_planner.mixed import OPTIMIZER, MixedPlan, Options, Search, plan_mixed, tensor_degrees
from xirang_planner.planner import leanest_need, rank_plans
from xirang_planner.timing import stage_seconds


def mixed_report(
    shape: ModelShape, cluster: MixedCluster, global_batch: int, tp: int | None = None
) -> dict[str, Any]:
    """The search's answer as the command prints it (and ``--json`` gives it)."""
    search = plan_mixed(shape, cluster, global_batch, tp)
    if search.best is None:
        raise PlanError(nothing_fits(shape, cluster, global_batch, tp))
    best = search.best
    alone = [
        single_type(shape, cluster, global_batch, g, search, tp) for g in range(len(cluster.groups))
    ]
    fitting = [a for a in alone if a["step_s"] is not None]
    baseline = min(fitting, key=lambda a: a["step_s"]) if fitting else None
    report: dict[str, Any] = {
        "model": shape.__dict__,
        "cluster": cluster_row(cluster),
        "global_batch": global_batch,
        "plan": plan_row(shape, cluster, best),
        "alone": alone,
        "best_single_type": baseline["device"] if baseline else None,
        "speedup_vs_best_single_type": (
            round(baseline["step_s"] / best.step, 3) if baseline else None
        ),
        "searched": {"plans": search.tried, "fitting": search.fitted},
    }
    if not best.runnable and search.runnable is not None:
        report["one_pipeline_kind"] = plan_row(shape, cluster, search.runnable)
    return report


def cluster_row(cluster: MixedCluster) -> dict[str, Any]:
    groups = [
        {
            "device": g.device,
            "devices": g.devices,
            "nodes": g.nodes,
            "devices_per_node": g.devices_per_node,
            "memory_gb": g.memory_gb,
            "tflops": g.tflops,
        }
        for g in cluster.groups
    ]
    return {
        "name": cluster.name,
        "groups": groups,
        "cross_gbps": cluster.cross_gbps,
        "cross_latency_us": cluster.cross_latency_us,
    }


def plan_row(shape: ModelShape, cluster: MixedCluster, plan: MixedPlan) -> dict[str, Any]:
    """Pipeline kinds with their stages (device type, devices, layers, memory, seconds per
    micro-batch), each kind's share of the batch, and the rows each device type sees."""
    rows = sum(s.rows for s in plan.shares)
    first = plan.shares[0].pipeline.plan
    kinds = []
    for share in plan.shares:
        pipe = share.pipeline
        stages = []
        for s, (g, count) in enumerate(
            zip(pipe.groups, pipe.plan.layer_counts(shape.layers), strict=True)
        ):
            device = cluster.groups[g]
            stages.append(
                {
                    "device": device.device,
                    "devices": pipe.plan.dp * pipe.plan.tp,
                    "layers": count,
                    "memory_bytes": pipe.memory[s],
                    "seconds_per_micro_batch": stage_seconds(shape, pipe.plan, s, device).total,
                }
            )
        kinds.append(
            {
                "replicas": pipe.plan.dp,
                "micro_batches_per_replica": share.micro_batches,
                "rows": share.rows,
                "share": share.rows / rows,
                "step_s": share.time.as_dict(),
                "stages": stages,
                "label": pipe.plan.label(),
            }
        )
    per_type: dict[str, int] = {}
    for share in plan.shares:
        for g in sorted(set(share.pipeline.groups)):
            name = cluster.groups[g].device
            per_type[name] = per_type.get(name, 0) + share.rows
    return {
        "step_s": plan.step,
        "tokens_per_s": rows * shape.seq_len / plan.step,
        "sync_s": plan.sync,
        "tp": first.tp,
        "sp": first.sp,
        "recompute": first.recompute,
        "micro_batch": first.micro_batch,
        "schedule": first.schedule,
        "pipelines": kinds,
        "rows_per_type": per_type,
        "runs_as": runs_as(first, rows) if plan.runnable else None,
        "runs_as_problem": batch_rule(first.world, rows) if plan.runnable else "",
    }


def batch_rule(workers: int, global_batch: int) -> str:
    """What keeps a one-kind plan from running as printed: a run's global batch divides over
    its workers (the config's check), or an empty string."""
    if not global_batch % workers:
        return ""
    fits = -(-global_batch // workers) * workers
    return (
        f"a run's global batch must be a multiple of its {workers} workers: plan "
        f"global_batch={fits} to run it"
    )


def runs_as(plan: ParallelPlan, global_batch: int) -> str:
    """The command-line settings that run a one-kind plan (ranks placed stage by stage)."""
    keys = ("dp", "tp", "pp", "sp", "zero", "recompute", "schedule")
    settings = plan.settings()
    parts = ["parallel=hybrid"] + [f"parallel.{k}={_value(settings[k])}" for k in keys]
    if plan.stage_layers:
        parts.append(f"parallel.stage_layers=[{','.join(map(str, plan.stage_layers))}]")
    parts += [
        f"trainer.global_batch={global_batch}",
        f"trainer.micro_batch={plan.micro_batch}",
        f"trainer.nproc={plan.world}",
    ]
    return " ".join(parts)


def _value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def single_type(
    shape: ModelShape,
    cluster: MixedCluster,
    global_batch: int,
    group: int,
    search: Search,
    tp: int | None,
) -> dict[str, Any]:
    """One device type alone: the faster of the uniform planner's best even split and the
    mixed planner's best pipeline on that type (uneven stages), or why neither fits."""
    device = cluster.groups[group]
    options: list[tuple[float, str, str]] = []
    try:
        best = rank_plans(shape, device, global_batch, tp=tp).best
        options.append((best.time.total, best.plan.label(), "uniform planner"))
    except PlanError:
        pass
    uneven = search.alone.get(group)
    if uneven is not None:
        options.append((uneven.step, uneven.shares[0].pipeline.plan.label(), "uneven stages"))
    row: dict[str, Any] = {"device": device.device, "devices": device.devices}
    if not options:
        plan, need = leanest_need(shape, device, global_batch, device.devices, OPTIMIZER, None)
        if plan is None:
            why = f"no valid split of {device.devices} devices for global batch {global_batch}"
        else:
            why = (
                f"does not fit: no uneven pipeline holds it, and the leanest even split "
                f"({plan.label()}) needs {_gib(need)} per device"
            )
        return {**row, "step_s": None, "plan": None, "why": why}
    step, label, source = min(options)
    return {**row, "step_s": step, "plan": label, "source": source}


def nothing_fits(
    shape: ModelShape, cluster: MixedCluster, global_batch: int, tp: int | None
) -> str:
    """Why no mixed plan fits: a single layer's stage fits no device type (even at the largest
    ``tp`` with full recompute and one micro-batch), or the stages together cannot hold the
    model, naming what would help."""
    degree = max(tensor_degrees(shape, cluster, tp))
    lean = Options(degree, 1, "full").plan(1, 3, (1, 1, 1))
    need = stage_memory(shape, lean, 1, OPTIMIZER, 1).total  # one micro-batch in flight
    have = ", ".join(f"{_gib(g.memory_bytes)} ({g.device})" for g in cluster.groups)
    if all(need > g.memory_bytes for g in cluster.groups):
        return (
            f"no pipeline stage fits any device: one layer of this model (tp={degree}"
            f"{' sp' if degree > 1 else ''}, recompute=full, micro-batch 1, one micro-batch in "
            f"flight) needs {_gib(need)} per device, and the devices have {have}. Valid: a "
            f"shorter sequence (seq=N), a smaller model, or devices with more memory"
        )
    total = sum(g.devices * g.memory_bytes for g in cluster.groups)
    return (
        f"the model fits no split of {cluster.name} ({cluster.describe()}, {_gib(total)} in "
        f"all): at every tp, recompute and micro-batch tried, its stages cannot hold the "
        f"{shape.layers} layers, or global batch {global_batch} gives fewer micro-batches than "
        f"a pipeline has stages (1F1B needs one per stage). Add devices, raise global_batch, "
        f"or plan a smaller model or sequence"
    )


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:.1f} GiB"


def print_mixed(report: dict[str, Any], console: Any) -> None:
    """The report as text: the plan, its stages, the shares, each type alone, the speedup.
    Lines are never broken (``soft_wrap``): the ``runs as`` line is a command to copy."""

    def say(text: str) -> None:
        console.print(text, soft_wrap=True, highlight=False)

    s, c = report["model"], report["cluster"]
    say(
        f"[bold]{s['layers']} layers, hidden {s['hidden']}, {s['heads']} heads, vocab "
        f"{s['vocab']}, seq {s['seq_len']}, {s['params'] / 1e6:.1f}M params[/]"
    )
    groups = " + ".join(f"{g['devices']} {g['device']}" for g in c["groups"])
    say(f"on {c['name']}: {groups}")
    say(f"between types {c['cross_gbps']:g} GB/s; global batch {report['global_batch']}")
    _print_plan("mixed plan", report["plan"], say)
    if "one_pipeline_kind" in report:
        _print_plan("best plan as one pipeline kind", report["one_pipeline_kind"], say)
    say("each device type alone:")
    for row in report["alone"]:
        if row["step_s"] is None:
            say(f"  {row['devices']} {row['device']}: {row['why']}")
        else:
            say(
                f"  {row['devices']} {row['device']}: step {row['step_s']:.2f} s, "
                f"{row['plan']} ({row['source']})"
            )
    speedup = report["speedup_vs_best_single_type"]
    if speedup is None:
        say("predicted speedup over the best single-type plan: none fits on one type alone")
    else:
        say(
            f"predicted speedup over the best single-type plan ({report['best_single_type']}"
            f"): {speedup:.2f}x"
        )


def _print_plan(title: str, plan: dict[str, Any], say: Any) -> None:
    say(f"{title}: step {plan['step_s']:.2f} s, {plan['tokens_per_s']:,.0f} tokens/s")
    exchange = f", exchange between kinds {plan['sync_s']:.2f} s" if plan["sync_s"] else ""
    say(
        f"  tp={plan['tp']}{' sp' if plan['sp'] else ''}, recompute={plan['recompute']}, "
        f"micro-batch {plan['micro_batch']}, {plan['schedule']}{exchange}"
    )
    for i, kind in enumerate(plan["pipelines"], 1):
        step, stages = kind["step_s"], len(kind["stages"])
        say(
            f"pipeline {i}: {_count(kind['replicas'], 'replica')} of {_count(stages, 'stage')}, "
            f"{kind['micro_batches_per_replica']} micro-batches each: {kind['rows']} rows "
            f"({100 * kind['share']:.0f}%)"
        )
        say(
            f"  step {step['total']:.2f} s: compute {step['compute']:.2f}, bubble "
            f"{step['bubble']:.2f}, comm {step['comm']:.2f}"
        )
        say("  stage  device            devices  layers  GiB/dev  s/micro-batch")
        for n, st in enumerate(kind["stages"]):
            say(
                f"  {n:>5}  {st['device']:<16}  {st['devices']:>7}  {st['layers']:>6}  "
                f"{st['memory_bytes'] / 2**30:>7.1f}  {st['seconds_per_micro_batch']:>13.4f}"
            )
    total = sum(k["rows"] for k in plan["pipelines"])
    say("batch share per device type (rows of the step each type runs):")
    for name, rows in plan["rows_per_type"].items():
        say(f"  {name:<16}  {rows:>6} rows ({100 * rows / total:.0f}%)")
    if plan["runs_as_problem"]:
        say(f"runs as: not as planned; {plan['runs_as_problem']}")
    elif plan["runs_as"]:
        say(f"runs as (ranks placed stage by stage): {plan['runs_as']}")
    else:
        say(
            "runs as: not yet; several pipeline kinds need balanced data parallelism across "
            "pipelines of different shapes, which the runtime does not run"
        )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
