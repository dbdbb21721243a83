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
) -> list[Result]:
    """Replay the same jobs under each policy and each ``mixing`` mode; prints the table,
    writes files under ``out``."""
    unknown = [mode for mode in mixing if mode not in MIXING]
    if unknown:
        raise PoolError(f"--mixing {unknown[0]}: one of {', '.join(MIXING)}")
    data = clusterfile.read(cluster)
    _, throughputs, _ = clusterfile.build(dict(data))
    jobs = traces.load(trace, throughputs.classes(), seed, limit or None)
    results: list[Result] = []
    for name in (n.strip() for n in policies if n.strip()):
        results.extend(_replay(data, name, jobs, mode) for mode in mixing)
    Console().print(comparison_table([r.row() for r in results]))
    if out:
        write(results, Path(out))
    return results


def _replay(data: dict, policy: str, jobs: list[traces.TraceJob], mixing: str) -> Result:
    """One policy's replay, announced on stderr first: a long trace takes minutes."""
    progress, label = Console(stderr=True), f"{policy} (mixing {mixing})"
    progress.print(f"pool simulate: replaying {len(jobs)} jobs under {label} ...")
    result = Simulator(data, policy, mixing=mixing).run(jobs)
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
