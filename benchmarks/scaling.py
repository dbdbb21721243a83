"""Crossing nodes: tokens/s of the embedded model on 1 node x 2 workers against 2 nodes x 1 worker
on the multi-node test bed (.ci/services/slurm_multinode.sh: two Slurm nodes in their own
network namespaces, joined by a bridge), both through ``scheduler=slurm``, with the same cores
either way, so the ratio shows what crossing nodes costs. Sides alternate, best of ``--rounds``.

The prediction is the communication model's (xirang.comm.cost_model): the ring all-reduce
of the gradients over each link, whose latency and bandwidth are fitted from all-reduces timed
by srun tasks on one node (loopback) and on two nodes (the bridge). The 1-node run's step time
minus its predicted all-reduce, plus the bridge's, is the 2-node step it predicts.

Needs the test bed (root: ``bash .ci/services/slurm_multinode.sh``). Last line:
``multinode_ratio=<2 nodes over 1 node> predicted_ratio=<model> prediction_err=<|m-p|/m>``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = Path(os.environ.get("XIRANG_SLURM_MULTINODE", "/tmp/xirang-multinode")) / "etc/slurm.conf"
RUN = (
    "scheduler=slurm",
    "parallel=ddp",
    "tokenizer=bytes",
    "trainer.threads=1",
    "trainer.sample_tokens=0",
    "trainer.log_every=5",
    "checkpoint=disabled",
    "checkpoint.resume=never",
)
SIZES = (2**16, 2**18, 2**20, 2**22)  # bytes of float32 all-reduced by the probe
SIDES = {"1x2": ("scheduler.nodes=1", "trainer.nproc=2"), "2x1": ("scheduler.nodes=2",)}


def env() -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(CONF), "OMP_NUM_THREADS": "1"}


def tokens_per_s(side: str, steps: int, work: Path) -> tuple[float, dict]:
    """One run of ``side``: its summary's tokens/s (compile-free steps, wall of the loop)."""
    root = Path(tempfile.mkdtemp(prefix=f"{side}-", dir=work))
    done = subprocess.run(
        [sys.executable, "-m", "xirang", *RUN, *SIDES[side], f"trainer.max_steps={steps}"],
        cwd=root,
        env={**env(), "XIRANG_RUNS": str(root / "runs")},
        capture_output=True,
        text=True,
    )
    if done.returncode:
        sys.exit(f"{side} run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    (summary,) = (root / "runs").rglob("summary.json")
    data = json.loads(summary.read_text())
    return data["tokens_per_s"], data


def probe(out: str) -> None:
    """In each srun task: time gloo all-reduces of SIZES; rank 0 writes (nbytes, p, s) rows."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    rows = []
    for nbytes in SIZES:
        tensor = torch.ones(nbytes // 4)
        for _ in range(3):
            dist.all_reduce(tensor)
        best = float("inf")
        for _ in range(10):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(tensor)
            best = min(best, time.perf_counter() - start)
        rows.append((nbytes, world, best))
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def link(nodes: int, work: Path):
    """The fitted link of 2 srun tasks on ``nodes`` node(s)."""
    from xirang.comm.cost_model import fit_link

    out = work / f"probe-{nodes}.json"
    script = (
        'export MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)" '
        "MASTER_PORT=29611; "
        f"srun -n2 --ntasks-per-node={2 // nodes} {sys.executable} {__file__} --probe {out}"
    )
    subprocess.run(
        ["salloc", f"-N{nodes}", "-n2", "bash", "-c", script], env=env(), check=True, cwd=ROOT
    )
    return fit_link("all_reduce", [tuple(r) for r in json.loads(out.read_text())])


def grad_bytes(summary: dict) -> float:
    """Bytes of the gradients DDP all-reduces per step: every parameter in float32."""
    from xirang_core.run import compose_config

    config = compose_config(["tokenizer=bytes"])
    import torch

    from xirang_core.plugins import get_registry

    family = get_registry().load("model", config["model"]["family"])
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    with torch.device("meta"):
        model = family.from_config(settings)
    return 4.0 * sum(p.numel() for p in model.parameters() if p.requires_grad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        return probe(args.probe)
    if not CONF.exists():
        sys.exit(f"no multi-node test bed at {CONF}: run bash .ci/services/slurm_multinode.sh")
    from xirang.comm.cost_model import ring_time

    work = Path(tempfile.mkdtemp(prefix="xirang-scaling-"))
    best = {side: 0.0 for side in SIDES}
    summary: dict = {}
    for round_ in range(args.rounds):
        for side in SIDES if round_ % 2 == 0 else reversed(list(SIDES)):
            tps, summary = tokens_per_s(side, args.steps, work)
            best[side] = max(best[side], tps)
            print(f"round {round_ + 1} {side}: {tps:,.0f} tokens/s", flush=True)
    loopback, bridge = link(1, work), link(2, work)
    print(f"loopback {loopback.describe()}; bridge {bridge.describe()}")
    nbytes = grad_bytes(summary)
    step_1 = summary["tokens"] / summary["steps"] / best["1x2"]
    step_2 = step_1 - ring_time("all_reduce", nbytes, 2, loopback)
    step_2 += ring_time("all_reduce", nbytes, 2, bridge)
    measured, predicted = best["2x1"] / best["1x2"], step_1 / step_2
    print(f"1 node x 2 workers {best['1x2']:,.0f} tokens/s; 2 nodes x 1 worker {best['2x1']:,.0f}")
    print(
        f"multinode_ratio={measured:.3f} predicted_ratio={predicted:.3f} "
        f"prediction_err={abs(measured - predicted) / measured:.3f}"
    )


if __name__ == "__main__":
    main()
