"""``benchmarks/hetero.py``'s straggler figures: the steps from the quota drop to the first
step with work moved off the slowed worker, and the plot of per-rank shares."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "hetero.py"


@pytest.fixture(scope="module")
def hetero() -> ModuleType:
    spec = importlib.util.spec_from_file_location("hetero_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shares_by_step(*shares: list[int]) -> list[dict]:
    return [{"step": i + 1, "balance_shares": s} for i, s in enumerate(shares)]


def test_rebalance_steps_count_from_the_drop_to_work_moved_off_the_slowed_rank(
    hetero: ModuleType,
) -> None:
    # noise had moved work onto rank 1 before the drop at step 2; the move off it is at step 5
    records = shares_by_step([4, 4], [3, 5], [3, 5], [3, 5], [5, 3], [6, 2])
    assert hetero.rebalance_steps(records, 2) == 3
    assert hetero.rebalance_steps(shares_by_step([4, 4], [4, 4], [5, 3]), 3) is None


def test_the_plot_is_written(hetero: ModuleType, tmp_path: Path) -> None:
    records = shares_by_step([4, 4], [4, 4], [6, 2])
    records[-1]["balance_stragglers"] = [{"rank": 1, "step": 3, "speed_ratio": 0.3}]
    out = tmp_path / "plots" / "shares.png"
    hetero.plot_shares(records, 2, 0.4, out)
    assert out.read_bytes().startswith(b"\x89PNG")


def test_every_run_is_timed_from_the_end_of_the_warmup_steps(hetero: ModuleType) -> None:
    # a slow first step (start-up) does not count: 2 steps of 1,000 tokens in 4 s after it
    records = [
        {"step": 1, "tokens": 1000, "elapsed_s": 10.0},
        {"step": 2, "tokens": 2000, "elapsed_s": 12.0},
        {"step": 3, "tokens": 3000, "elapsed_s": 14.0},
    ]
    assert hetero.steady_tokens_per_s(records, 1) == 500.0
    assert hetero.steady_tokens_per_s(records, 2) == 500.0


@pytest.mark.parametrize("slurm", [False, True])
def test_every_run_it_starts_composes(hetero: ModuleType, slurm: bool) -> None:
    """Each run's overrides, locally and on the Slurm test bed, make a valid config: the
    compared runs split the same global batch, the solo ones run one worker, and the
    straggler run starts both workers at a full core with even shares."""
    from xirang_core.config import compose
    from xirang_core.plugins import get_registry

    args = hetero.parse_args(["--slurm"] if slurm else [])
    configs = hetero.configs_of(args)
    straggler = hetero.straggler_overrides(args, configs["balanced"])
    composed = {
        name: compose(hetero.run_overrides(args, extra), get_registry())
        for name, extra in {**configs, "straggler": straggler}.items()
    }
    for name, config in composed.items():
        assert config["trainer"]["global_batch"] == args.global_batch
        workers = config["trainer"]["nproc"] * config["scheduler"].get("nodes", 1)
        assert workers == (1 if name.startswith("solo") else 2), name
        assert config["scheduler"]["name"] == ("slurm" if slurm else "local")
    assert composed["balanced"]["parallel"]["balance"] == "adaptive"
    assert composed["uniform"]["parallel"]["balance"] == "uniform"
    assert composed["straggler"]["parallel"]["balance_shares"] == [8, 8]
    if not slurm:
        assert composed["straggler"]["scheduler"]["worker_quota"] == [1.0, 1.0]
        assert composed["balanced"]["scheduler"]["worker_quota"] == [1.0, 0.4]
        assert all(composed[n]["scheduler"]["cpu_bind"] == "cores" for n in ("uniform", "balanced"))
    else:
        nodes = {composed[n]["scheduler"]["nodelist"] for n in ("solo_fast", "solo_slow")}
        assert nodes == {"node1", "node2"}


def test_the_pipeline_runs_it_starts_compose(hetero: ModuleType) -> None:
    """``--pipeline``: the even and the auto split run two stages with stage 1 under the
    quota (2.5:1 at the default 0.4), the solo runs one worker each."""
    from xirang_core.config import compose
    from xirang_core.plugins import get_registry

    args = hetero.parse_args(["--pipeline"])
    configs = hetero.pipeline_configs(args)
    composed = {
        name: compose(hetero.run_overrides(args, extra), get_registry())
        for name, extra in configs.items()
    }
    for name in ("even", "auto"):
        assert composed[name]["parallel"]["name"] == "pp"
        assert composed[name]["scheduler"]["worker_quota"] == [1.0, 0.4]
    assert composed["auto"]["parallel"]["stage_layers"] == "auto"
    assert composed["even"]["parallel"]["stage_layers"] == []
    assert [composed[n]["trainer"]["nproc"] for n in ("solo_fast", "solo_slow")] == [1, 1]


def test_runs_side_by_side_are_timed_over_the_span_both_ran(hetero: ModuleType) -> None:
    """The fast run went on after the slow one ended: its steps after that span, alone on
    the machine again, do not count toward the ceiling."""

    def run(step_s: float, steps: int, tokens: int) -> list[dict]:
        return [
            {"step": s, "tokens": s * tokens, "elapsed_s": s * step_s} for s in range(1, steps + 1)
        ]

    fast, slow = run(1.0, 40, 300), run(3.0, 10, 300)  # the slow one ends at 30 s
    fast[35:] = [dict(r, elapsed_s=r["elapsed_s"] - 5.0) for r in fast[35:]]  # faster alone
    assert hetero.overlapping_speeds(fast, slow, 2) == (300.0, 100.0)
    assert hetero.overlapping_speeds(slow, fast, 2) == (100.0, 300.0)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind")
def test_each_solo_run_computes_on_the_cpu_its_worker_has_in_the_two_worker_runs(
    hetero: ModuleType,
) -> None:
    """Worker k of a bound two-worker run has the k-th half of the CPUs: the fast worker's
    solo runs (and the side-by-side ones) go on the first, the slow one's on the second;
    unbound, none is bound."""
    cpus = sorted(os.sched_getaffinity(0))
    first, second = cpus[: len(cpus) // 2], cpus[len(cpus) // 2 : len(cpus) // 2 * 2]
    args = hetero.parse_args([])
    got = {n: hetero.solo_cpus(args, n) for n in ("solo_fast-0", "beside_slow-1", "balanced-0")}
    assert got == {"solo_fast-0": first, "beside_slow-1": second, "balanced-0": None}
    assert hetero.solo_cpus(hetero.parse_args(["--no-cpu-bind"]), "solo_slow-0") is None
    assert hetero.solo_cpus(hetero.parse_args(["--slurm"]), "solo_slow-0") is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind")
def test_on_slurm_each_node_computes_on_a_cpu_of_its_own_and_gets_its_cpus_back(
    hetero: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two running processes stand for the test bed's two slurmd (their pid files where
    .ci/services/slurm_multinode.sh writes them): while the benchmark runs, node i computes
    on the i-th half of the CPUs; after, on what it had before; unbound, nothing moves."""
    cpus = sorted(os.sched_getaffinity(0))
    half = len(cpus) // 2
    (tmp_path / "run").mkdir()
    monkeypatch.setattr(hetero, "SLURM_BED", tmp_path)
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        for i, process in enumerate(sleepers, 1):
            (tmp_path / "run" / f"slurmd-node{i}.pid").write_text(f"{process.pid}\n")
        with hetero.nodes_on_own_cpus(hetero.parse_args(["--slurm"])):
            held = [os.sched_getaffinity(p.pid) for p in sleepers]
        assert held == [set(cpus[:half]), set(cpus[half : 2 * half])]
        assert [os.sched_getaffinity(p.pid) for p in sleepers] == [set(cpus)] * 2
        with hetero.nodes_on_own_cpus(hetero.parse_args(["--slurm", "--no-cpu-bind"])):
            assert [os.sched_getaffinity(p.pid) for p in sleepers] == [set(cpus)] * 2
    finally:
        for process in sleepers:
            process.kill()
            process.wait()
