"""Compare policies on one trace and cluster: a table, results.json and plots."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from xirang_service.pool import clusterfile
from xirang_service.pool.errors import PoolError
from xirang_service.pool.report import comparison_table
from xirang_service.pool.sim import traces
from xirang_service.pool.sim.simulator import MIXING, Result, Simulator


def compare(
    trace: str | Path,
    cluster: str | Path,
    policies: list[str],
    limit: int = 0,
    seed: int = 0,
    out: str | Path | None = None,
    mixing: tuple[str, ...] = ("off",),
    loads: tuple[float, ...] = (1.0,),
    plot: str | Path | None = None,
) -> list[Result]:
    """Replay the same jobs under each policy, ``mixing`` mode and offered load (the trace's
    inter-arrival times divided by it); prints the table, writes files under ``out`` and the
    mean JCT against load to ``plot``."""
    unknown = [mode for mode in mixing if mode not in MIXING]
    if unknown:
        raise PoolError(f"--mixing {unknown[0]}: one of {', '.join(MIXING)}")
    data = clusterfile.read(cluster)
    _, throughputs, _ = clusterfile.build(dict(data))
    names = [n.strip() for n in policies if n.strip()]
    results: list[Result] = []
    for load in loads:
        jobs = traces.load(trace, throughputs.classes(), seed, limit or None, load)
        if "off" in mixing and len(set(mixing)) > 1:  # every mode replays the same jobs
            jobs = _same_jobs(jobs, data, announce=load == loads[0])
        for name in names:
            results.extend(_replay(data, name, jobs, mode, load) for mode in mixing)
    for load in loads:  # a table per load: each compares with its own baseline, in 80 columns
        title = "pool policies on the trace" + (f" at {load:g}x its load" if load != 1 else "")
        rows = [r.row() for r in results if r.load == load]
        Console().print(comparison_table(rows, title=title))
    if out:
        write(results, Path(out))
    if plot:
        plot_load(results, Path(plot))
    return results


def _same_jobs(jobs: list[traces.TraceJob], data: dict, announce: bool) -> list[traces.TraceJob]:
    """The jobs some single device type can hold. ``mixing off`` refuses the others, which
    would run only where jobs may mix, so each mode's mean JCT would be over other jobs (the
    refused ones are the widest and longest: one in the bundled sample waits 300 h): they
    leave every replay, and stderr says how many."""
    cluster, throughputs, _ = clusterfile.build(dict(data))

    def holds(job: traces.TraceJob) -> bool:
        return any(
            (need := throughputs.devices_for(job.job_class, job.cards, t))
            and need <= cluster.capacity(t, healthy_only=False)
            for t in cluster.types
        )

    kept = [job for job in jobs if holds(job)]
    if announce and len(kept) < len(jobs):
        Console(stderr=True).print(
            f"pool simulate: {len(jobs) - len(kept)} jobs need more devices than one type "
            "has: left out of every replay, so that each mixing mode runs the same jobs"
        )
    return kept


def _replay(
    data: dict, policy: str, jobs: list[traces.TraceJob], mixing: str, load: float
) -> Result:
    """One policy's replay, announced on stderr first: a long trace takes minutes."""
    progress, label = Console(stderr=True), f"{policy} (mixing {mixing}, load {load:g}x)"
    progress.print(f"pool simulate: replaying {len(jobs)} jobs under {label} ...")
    result = Simulator(data, policy, mixing=mixing).run(jobs)
    result.load = load
    progress.print(f"pool simulate: {label} done in {result.wall_s:.1f} s")
    return result


def write(results: list[Result], out: Path) -> None:
    """results.json and jct_cdf.png (completion-time distribution per policy)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps([r.row() for r in results], indent=2))
    fig, ax = plt.subplots(figsize=(6, 4))
    for result in results:
        jct = sorted(v / 3600 for v in result.jct_by_job.values())
        if jct:
            label = f"{result.policy}, mixing {result.mixing}"
            ax.plot(jct, [i / len(jct) for i in range(1, len(jct) + 1)], label=label)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "jct_cdf.png", dpi=100)
    plt.close(fig)


def plot_load(results: list[Result], path: Path) -> None:
    """Mean JCT against offered load, a line per policy and mixing mode (a policy's colour;
    its mixing modes dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    lines: dict[tuple[str, str], list[Result]] = {}
    for result in results:
        lines.setdefault((result.policy, result.mixing), []).append(result)
    colour = {p: f"C{i}" for i, p in enumerate(dict.fromkeys(r.policy for r in results))}
    for (policy, mixing), line in lines.items():
        line.sort(key=lambda r: r.load)
        style = "o-" if mixing == "off" else "s--"
        label = policy if mixing == "off" else f"{policy}, mixing {mixing}"
        points = [r.load for r in line], [r.avg_jct_h for r in line]
        ax.plot(*points, style, color=colour[policy], label=label)
    ax.set_yscale("log")
    ax.set_xlabel("offered load (x the trace's arrival rate)")
    ax.set_ylabel("mean job completion time (h)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
