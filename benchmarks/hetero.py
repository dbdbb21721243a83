"""Two unequal workers in one data-parallel job: the uniform split against ``parallel.balance``.

One worker has a full core, the other runs under a CPU quota (``scheduler.worker_quota``, the
cgroup v1 CPU controller, as Kubernetes CPU limits are: a slower device made real, nothing
sleeps). Same model, global batch and steps for every run, alternating round by round:

- (a) uniform: DDP splits each step's micro-batches evenly, as DDP, FSDP and torchtitan do;
- (b) balanced: ``parallel.balance=adaptive`` as a user runs it, its first shares from each
  worker's calibration at start-up;
- each worker alone (one process under its quota) for its solo tokens/s;
- both solo runs at once, two independent jobs with no collective between them: what the two
  workers compute while they share one machine (cores, memory, caches), so the most a
  balanced run of the two could reach on this test bed;
- once after the rounds, the straggler run: both workers start with a full core and even
  shares (given, so that the move is itself measured), and at the end of step ``--slow-at``
  worker 1's quota drops to ``--quota`` (the drill fault ``drill.slow``, the same cgroup
  mechanism). ``straggler_rebalance_steps`` is how many
  steps after the drop the first step runs with work moved off worker 1; ``--plot`` draws each
  rank's share of the step over that run.

Locally each of the two workers computes on a CPU of its own (``scheduler.cpu_bind=cores``;
each solo run, by ``taskset``, on the CPU its worker has in the two-worker runs), as two
devices do: unbound, the kernel may have them take turns on one core. ``--no-cpu-bind`` leaves
them to the kernel.

Every run is timed over the same span: from the end of step ``--warmup`` to its last step
(start-up, the first allocations and the first shares left out, as for every run alike).
Each configuration runs ``--rounds`` times (3), and each figure is the median of its runs.

``--slurm``: the same on the two-node Slurm test bed (.ci/services/slurm_multinode.sh, started
when down): a task on each node, node2's slurmd (and so its job steps) under the quota, each
node alone for its solo figure; in the straggler run node2 starts at a full core. With
``--cpu-bind`` each node's slurmd is put on a CPU of its own for the benchmark (``taskset``):
the test bed's nodes share one host, and so they compute as two machines would.

Last line: ``hetero_efficiency=<balanced tok/s over the sum of the solo tok/s>
speedup_vs_uniform=<balanced over uniform tok/s> straggler_rebalance_steps=<n, or none>
loss_diff=<max |balanced - uniform| loss over the logged steps>
beside_ceiling=<the solo runs at once over the solo runs alone, tok/s>
efficiency_vs_beside=<balanced over the solo runs at once>``. Needs root (the cgroups).

``--pipeline``: the same two workers as a two-stage pipeline (``parallel=pp``, stage 1 under
the quota: at the default 0.4, speeds 2.5:1), each round the even split of the layers, the
split ``parallel.stage_layers=auto`` chooses from the workers' measured speeds, and each worker
alone. The ideal is the speeds' own: stages whose layers follow their speeds exactly, no
bubble, run at the sum of the solo tokens/s, ``sum / (2 · min)`` times the even split's.
Last line: ``pipeline_efficiency=<auto over the sum of the solo tok/s>
speedup_vs_even=<auto over even> speedup_vs_ideal=<that over the ideal speedup>
stage_layers=<auto's split> bubble=<auto's idle share> loss_diff=<max |auto - even| loss>``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def train(
    folder: Path, name: str, args: argparse.Namespace, extra: list[str], steps: int = 0
) -> dict[str, Any]:
    """One run of ``python -m xirang`` (``steps``: other than ``--steps``); its tokens/s and
    logged losses and shares per step."""
    records = finish(start(folder, name, args, extra, steps))
    speed = steady_tokens_per_s(records, args.warmup)
    print(f"{name}: {speed:.1f} tok/s after step {args.warmup}", flush=True)
    return {"tokens_per_s": speed, "records": records}


def start(
    folder: Path, name: str, args: argparse.Namespace, extra: list[str], steps: int = 0
) -> tuple[str, Path, subprocess.Popen[bytes]]:
    """``python -m xirang`` started (its errors kept in a file: a pipe nobody reads while a
    run beside it is waited for could fill and stall it)."""
    run_dir = folder / name
    overrides = run_overrides(args, extra, steps)
    command = [sys.executable, "-m", "xirang", *overrides, f"hydra.run.dir={run_dir}"]
    cpus = solo_cpus(args, name)
    if cpus is not None:
        command = ["taskset", "--cpu-list", ",".join(map(str, cpus)), *command]
    env = {**os.environ, **args.env}
    with (folder / f"{name}.stderr").open("wb") as errors:
        return (
            name,
            run_dir,
            subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=errors, cwd=folder, env=env
            ),
        )


def solo_cpus(args: argparse.Namespace, name: str) -> list[int] | None:
    """The CPUs a local solo run is bound to (``--cpu-bind``): those its worker has in the
    two-worker runs (``scheduler.cpu_bind=cores`` gives each worker its equal part of this
    process's CPUs, in order); None for the two-worker runs (bound by the launcher) and on
    Slurm."""
    if args.slurm or not args.cpu_bind or not name.startswith(("solo_", "beside_")):
        return None
    return host_halves()["slow" in name]


def host_halves() -> list[list[int]]:
    """This process's CPUs in two equal runs, in order: the i-th for worker or node i (as
    ``scheduler.cpu_bind=cores`` splits them for a node's two workers)."""
    from xirang.launch import cpu_slices

    return cpu_slices(sorted(os.sched_getaffinity(0)), 2)


def finish(started: tuple[str, Path, subprocess.Popen[bytes]]) -> list[dict[str, Any]]:
    """The records of a started run, once it ended (the benchmark stops if it failed)."""
    name, run_dir, process = started
    if process.wait() != 0:
        errors = (run_dir.parent / f"{name}.stderr").read_text(errors="replace")
        sys.exit(f"{name} failed:\n{errors[-3000:]}")
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def beside(
    folder: Path, round_: int, args: argparse.Namespace, configs: dict[str, list[str]], solo: Any
) -> dict[str, Any]:
    """Both solo runs at once, as two independent jobs with no collective between them: what
    the two workers compute while they share the machine (locally its cores, memory and
    caches; on Slurm the test bed's one host). The fast one runs as many more steps as it is
    faster, and each speed is taken over the span both ran, so their sum is the most a
    balanced run of the two could reach here (``beside_ceiling``: that sum over the solos')."""
    fast, slow = solo["solo_fast"][-1]["tokens_per_s"], solo["solo_slow"][-1]["tokens_per_s"]
    fast_steps = math.ceil(args.steps * fast / slow) + args.warmup
    both = [
        start(folder, f"beside_fast-{round_}", args, configs["solo_fast"], fast_steps),
        start(folder, f"beside_slow-{round_}", args, configs["solo_slow"]),
    ]
    fast_records, slow_records = (finish(s) for s in both)
    speeds = overlapping_speeds(fast_records, slow_records, args.warmup)
    print(f"beside-{round_}: {speeds[0]:.1f} + {speeds[1]:.1f} tok/s", flush=True)
    return {"tokens_per_s": sum(speeds)}


def overlapping_speeds(
    fast: list[dict[str, Any]], slow: list[dict[str, Any]], warmup: int
) -> tuple[float, float]:
    """Each run's tokens/s from the end of step ``warmup`` to its last step that ended while
    the other still ran (both started together, so their clocks start together)."""
    span = min(fast[-1]["elapsed_s"], slow[-1]["elapsed_s"])
    inside = [
        [r for r in run if r["step"] <= warmup or r["elapsed_s"] <= span] for run in (fast, slow)
    ]
    return steady_tokens_per_s(inside[0], warmup), steady_tokens_per_s(inside[1], warmup)


def run_overrides(args: argparse.Namespace, extra: list[str], steps: int = 0) -> list[str]:
    """What every run is given (the same model, data, batch and steps), then ``extra``."""
    return [
        f"model={args.model}",
        "tokenizer=bytes",
        f"data.seq_len={args.seq_len}",
        f"trainer.global_batch={args.global_batch}",
        "trainer.micro_batch=1",
        f"trainer.max_steps={steps or args.steps}",
        "trainer.log_every=1",
        "trainer.sample_tokens=0",
        "trainer.threads=1",
        "checkpoint.interval=0",
        *args.override,
        *extra,
    ]


def steady_tokens_per_s(records: list[dict[str, Any]], warmup: int) -> float:
    """Tokens per second from the end of step ``warmup`` to the last step: the same span for
    every run, past start-up (first allocations, thread pools, the first shares)."""
    start = next(r for r in records if r["step"] == warmup)
    end = records[-1]
    return (end["tokens"] - start["tokens"]) / (end["elapsed_s"] - start["elapsed_s"])


def local_configs(args: argparse.Namespace) -> dict[str, list[str]]:
    """Two local workers, worker 1 under the quota (``scheduler.worker_quota``)."""
    quotas = f"[1.0,{args.quota}]"
    two = [
        "parallel=ddp",
        "trainer.nproc=2",
        f"scheduler.cpu_bind={'cores' if args.cpu_bind else 'none'}",
    ]
    return {
        "uniform": [*two, f"scheduler.worker_quota={quotas}"],
        "balanced": [
            *two,
            f"scheduler.worker_quota={quotas}",
            "parallel.balance=adaptive",
            f"parallel.balance_every={args.every}",
        ],
        "solo_fast": ["scheduler.worker_quota=[1.0]"],
        "solo_slow": [f"scheduler.worker_quota=[{args.quota}]"],
    }


def slurm_configs(args: argparse.Namespace) -> dict[str, list[str]]:
    """One task on each of the test bed's two nodes (node2's slurmd under the quota, so its
    job steps are), each alone on its node for the solo runs."""
    two = ["scheduler=slurm", "scheduler.nodes=2", "trainer.nproc=1", "parallel=ddp"]
    return {
        "uniform": two,
        "balanced": [*two, "parallel.balance=adaptive", f"parallel.balance_every={args.every}"],
        "solo_fast": ["scheduler=slurm", "scheduler.nodelist=node1"],
        "solo_slow": ["scheduler=slurm", "scheduler.nodelist=node2"],
    }


def runs(args: argparse.Namespace, tmp: Path) -> dict[str, list[dict[str, Any]]]:
    """Every configuration once per round, in turn (drift in the machine's load hits all),
    then the straggler run."""
    configs = configs_of(args)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in [*configs, "beside"]}
    with nodes_on_own_cpus(args), slow_node(args, args.quota):
        for round_ in range(args.rounds):
            for name, extra in configs.items():
                found[name].append(train(tmp, f"{name}-{round_}", args, extra))
            found["beside"].append(beside(tmp, round_, args, configs, found))
    straggler = straggler_overrides(args, configs["balanced"])
    with nodes_on_own_cpus(args), slow_node(args, 1.0):  # node2 at a full core until the drill
        found["straggler"] = [train(tmp, "straggler", args, straggler, args.straggler_steps)]
    return found


def configs_of(args: argparse.Namespace) -> dict[str, list[str]]:
    """The runs compared, each by its overrides: on the Slurm test bed or on this machine."""
    return slurm_configs(args) if args.slurm else local_configs(args)


def pipeline_configs(args: argparse.Namespace) -> dict[str, list[str]]:
    """``--pipeline``: two local workers as two pipeline stages, stage 1 under the quota, with
    the even split and with ``parallel.stage_layers=auto``; each worker alone."""
    solo = local_configs(args)
    two = [
        "parallel=pp",
        "trainer.nproc=2",
        f"scheduler.cpu_bind={'cores' if args.cpu_bind else 'none'}",
        f"scheduler.worker_quota=[1.0,{args.quota}]",
    ]
    return {
        "even": two,
        "auto": [*two, "parallel.stage_layers=auto"],
        "solo_fast": solo["solo_fast"],
        "solo_slow": solo["solo_slow"],
    }


def pipeline_main(args: argparse.Namespace) -> None:
    """``--pipeline``: each configuration once per round, in turn; the figures (medians) and
    the last line the module docstring describes."""
    configs = pipeline_configs(args)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    with tempfile.TemporaryDirectory(prefix="xirang-hetero-pp-") as tmp:
        for round_ in range(args.rounds):
            for name, extra in configs.items():
                found[name].append(train(Path(tmp), f"{name}-{round_}", args, extra))
    speed = {name: statistics.median(r["tokens_per_s"] for r in rs) for name, rs in found.items()}
    auto, even = found["auto"][-1]["records"], found["even"][-1]["records"]
    solo = (speed["solo_fast"], speed["solo_slow"])
    ideal = sum(solo) / (2 * min(solo))
    loss_diff = max(abs(a["loss"] - e["loss"]) for a, e in zip(auto, even, strict=True))
    print(
        f"solo tok/s {solo[0]:.1f} + {solo[1]:.1f}, even {speed['even']:.1f} (layers "
        f"{even[-1]['pipeline_stage_layers']}, bubble {even[-1]['pipeline_bubble']}), auto "
        f"{speed['auto']:.1f}; auto busy/idle ms per step {auto[-1]['pipeline_busy_ms']} / "
        f"{auto[-1]['pipeline_idle_ms']}"
    )
    print(
        f"pipeline_efficiency={speed['auto'] / sum(solo):.3f} "
        f"speedup_vs_even={speed['auto'] / speed['even']:.3f} "
        f"speedup_vs_ideal={speed['auto'] / speed['even'] / ideal:.3f} "
        f"stage_layers={':'.join(map(str, auto[-1]['pipeline_stage_layers']))} "
        f"bubble={auto[-1]['pipeline_bubble']} loss_diff={loss_diff:.2e}"
    )


def straggler_overrides(args: argparse.Namespace, balanced: list[str]) -> list[str]:
    """The balanced run from even shares, both workers at a full core until worker 1's quota
    drops to ``--quota`` at the end of step ``--slow-at`` (the drill ``drill.slow``)."""
    half = args.global_batch // 2
    found = [
        *(c for c in balanced if not c.startswith("scheduler.worker_quota=")),
        f"parallel.balance_shares=[{half},{half}]",
        f"+drill={{slow:[[{args.slow_at},1,{args.quota}]]}}",
    ]
    return found if args.slurm else [*found, "scheduler.worker_quota=[1.0,1.0]"]


def slow_node(args: argparse.Namespace, cpus: float) -> contextlib.AbstractContextManager[Any]:
    """On the Slurm test bed: node2's slurmd, and so the job steps it starts, under a quota
    of ``cpus`` (a drill may change it from inside a step); locally nothing (each run gives
    its workers' quotas)."""
    if not args.slurm:
        return contextlib.nullcontext()
    from xirang_local.quota import process_under_quota

    pid = int((SLURM_BED / "run" / "slurmd-node2.pid").read_text())
    return process_under_quota(pid, cpus, "hetero-node2")


@contextlib.contextmanager
def nodes_on_own_cpus(args: argparse.Namespace) -> Iterator[None]:
    """On the Slurm test bed (``--cpu-bind``): each node's slurmd, and so the job steps it
    starts, on a CPU of its own for a while (``taskset``; node i on the i-th of this process's
    CPUs, as :func:`host_halves`), so that the two nodes compute as two machines do rather than
    taking turns on the host's cores; each slurmd's CPUs are given back after (a node that
    registered while pinned would report fewer CPUs than its config says)."""
    if not (args.slurm and args.cpu_bind):
        yield
        return
    pids = [(SLURM_BED / "run" / f"slurmd-node{i}.pid").read_text().strip() for i in (1, 2)]
    before = [os.sched_getaffinity(int(pid)) for pid in pids]
    try:
        for pid, cpus in zip(pids, host_halves(), strict=True):
            pin(pid, cpus)
        yield
    finally:
        for pid, cpus in zip(pids, before, strict=True):
            pin(pid, cpus)


def pin(pid: str, cpus: Iterable[int]) -> None:
    """Process ``pid`` and every thread it has on ``cpus``; what it starts from now on too."""
    cpu_list = ",".join(map(str, sorted(cpus)))
    subprocess.run(
        ["taskset", "--all-tasks", "--cpu-list", "--pid", cpu_list, pid],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def slurm_bed() -> dict[str, str]:
    """The environment of a Slurm client of the two-node test bed, which is started first
    when its two nodes do not both answer."""
    env = {"SLURM_CONF": str(SLURM_BED / "etc" / "slurm.conf")}
    up = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, env={**os.environ, **env}
    )
    if up.returncode != 0 or len([t for t in up.stdout.split() if t.startswith("idle")]) < 2:
        service = Path(__file__).parents[1] / ".ci" / "services" / "slurm_multinode.sh"
        subprocess.run(["bash", str(service), "up"], check=True)
    return env


#: where .ci/services/slurm_multinode.sh keeps its cluster
SLURM_BED = Path(os.environ.get("XIRANG_SLURM_MULTINODE", "/tmp/xirang-multinode"))


def rebalance_steps(records: list[dict[str, Any]], slow_at: int) -> int | None:
    """Steps after the drop at ``slow_at`` until the first step that runs with fewer of the
    step's micro-batches on worker 1 than it had then; None if none did."""
    shares = {r["step"]: r["balance_shares"] for r in records}
    moved = (step for step in sorted(shares) if step > slow_at)
    return next((s - slow_at for s in moved if shares[s][1] < shares[slow_at][1]), None)


def plot_shares(records: list[dict[str, Any]], slow_at: int, quota: float, out: Path) -> None:
    """Each rank's share of the step's micro-batches over the straggler run, the drop marked."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    steps = [r["step"] for r in records]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for rank in range(len(records[0]["balance_shares"])):
        share = [r["balance_shares"][rank] / sum(r["balance_shares"]) for r in records]
        ax.step(steps, share, where="post", label=f"rank {rank}")
    ax.axvline(slow_at, color="grey", linestyle="--", label=f"rank 1 quota 1.0 -> {quota}")
    for straggler in records[-1].get("balance_stragglers", []):
        ax.axvline(straggler["step"], color="red", linestyle=":", label="straggler reported")
    ax.set(xlabel="step", ylabel="share of the step", ylim=(0, 1), title="adaptive shares")
    ax.legend(fontsize="small")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama_small")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=2, help="parallel.balance_every")
    parser.add_argument("--quota", type=float, default=0.4, help="the slow worker's CPUs")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="runs of each configuration, alternating; each figure is the median (one round "
        "read 0.870 to 0.921 on one idle evening)",
    )
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of each timing")
    parser.add_argument("--slow-at", type=int, default=4, help="the straggler run's drop")
    parser.add_argument("--straggler-steps", type=int, default=16)
    parser.add_argument("--plot", type=Path, default=Path("hetero_straggler_shares.png"))
    parser.add_argument(
        "--cpu-bind",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each worker on a CPU of its own, as a device of its own computes (locally "
        "scheduler.cpu_bind=cores and each solo run on its worker's CPU, by taskset; on Slurm "
        "each node's slurmd on its own CPU)",
    )
    parser.add_argument("--override", nargs="*", default=[], help="more overrides, each run")
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="a two-stage pipeline (parallel=pp), stage 1 under the quota: the even split "
        "against parallel.stage_layers=auto and the speeds' ideal (locally)",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="on the two-node Slurm test bed (.ci/services/slurm_multinode.sh; started when "
        "down): a task per node, node2 under the quota",
    )
    args = parser.parse_args(argv)
    if args.pipeline and args.slurm:
        parser.error("--pipeline runs locally (two workers of one host); drop --slurm")
    return args


def main() -> None:
    args = parse_args()
    args.env = slurm_bed() if args.slurm else {}
    os.environ.setdefault("GOMP_SPINCOUNT", "1000")  # waiting threads sleep (tests/conftest.py)
    if args.pipeline:
        pipeline_main(args)
        return
    with tempfile.TemporaryDirectory(prefix="xirang-hetero-") as tmp:
        found = runs(args, Path(tmp))
    straggler = found.pop("straggler")[0]["records"]
    plot_shares(straggler, args.slow_at, args.quota, args.plot)
    rebalanced = rebalance_steps(straggler, args.slow_at)
    speed = {name: statistics.median(r["tokens_per_s"] for r in rs) for name, rs in found.items()}
    balanced, uniform = found["balanced"][-1]["records"], found["uniform"][-1]["records"]
    loss_diff = max(abs(b["loss"] - u["loss"]) for b, u in zip(balanced, uniform, strict=True))
    solo_sum = speed["solo_fast"] + speed["solo_slow"]
    print(
        f"final shares {balanced[-1]['balance_shares']}, solo tok/s {speed['solo_fast']:.1f}"
        f" + {speed['solo_slow']:.1f}, uniform {speed['uniform']:.1f}"
    )
    print(
        "straggler run shares by step: "
        + " ".join(f"{r['step']}:{r['balance_shares']}" for r in straggler)
        + f"; stragglers reported: {straggler[-1].get('balance_stragglers', [])}; "
        f"plot: {args.plot}"
    )
    print(
        f"hetero_efficiency={speed['balanced'] / solo_sum:.3f} "
        f"speedup_vs_uniform={speed['balanced'] / speed['uniform']:.3f} "
        f"straggler_rebalance_steps={'none' if rebalanced is None else rebalanced} "
        f"loss_diff={loss_diff:.2e} beside_ceiling={speed['beside'] / solo_sum:.3f} "
        f"efficiency_vs_beside={speed['balanced'] / speed['beside']:.3f}"
    )


if __name__ == "__main__":
    main()
