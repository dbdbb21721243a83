"""The default ``trainer.threads`` against the best setting, on a host another job keeps busy.

Starts ``--busy`` processes that spin on a core each (another developer's job), then trains
the same small run (the embedded default model, ``--steps`` steps) with ``trainer.threads=0``
(the default: the cores the run may use) and with every explicit thread count from 1 to those
cores, in ``--rounds`` rounds whose order rotates, so a spell of outside load lands on every
setting alike. Each run is ``python -m xirang`` as a user types it, with no OpenMP settings
in its environment (``--libgomp-spin`` puts back the spin torch's OpenMP had before xirang set
its own: the figure before the fix). A setting's figure is its best tokens/s over the rounds
(``summary.json``: start-up and compilation left out). The busy processes are stopped at the
end, also on failure.

Last line: ``default_vs_best=<best tokens/s / default tokens/s> threads_default=<n>
threads_best=<n> load=<mean 1-minute load average at the runs' starts>``; goal: default within
1.2x of the best.
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

from xirang_core.devices.cores import OMP_DEFAULTS, available_cores

#: the OpenMP settings a user's shell would not have: the runs start without them
OMP_VARIABLES = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", *OMP_DEFAULTS)
#: libgomp's own spin before it sleeps, and Intel OpenMP's 200 ms (``--libgomp-spin``)
BEFORE = {"GOMP_SPINCOUNT": "300000", "KMP_BLOCKTIME": "200"}
#: one run's limit: a stuck run ends the benchmark rather than hang it
RUN_TIMEOUT_S = 600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=1, help="busy processes loading the host")
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--libgomp-spin", action="store_true", help="the spin before the fix")
    args = parser.parse_args()
    settings = [0, *range(1, available_cores() + 1)]
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)
    ]
    try:
        time.sleep(5)  # the busy processes take their cores before the first run
        runs = [
            run(threads, args.steps, args.libgomp_spin)
            for r in range(args.rounds)
            for threads in rotated(settings, r)
        ]
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    report(settings, runs)


def rotated(settings: list[int], shift: int) -> list[int]:
    shift %= len(settings)
    return settings[shift:] + settings[:shift]


def run(threads: int, steps: int, before: bool) -> dict:
    """One ``python -m xirang`` run with ``trainer.threads=threads``; its summary."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES}
    env.update(BEFORE if before else {})
    with tempfile.TemporaryDirectory() as folder:
        overrides = [
            f"trainer.max_steps={steps}",
            f"trainer.log_every={steps}",
            "trainer.sample_tokens=0",
            f"trainer.threads={threads}",
        ]
        done = subprocess.run(
            [sys.executable, "-m", "xirang", *overrides],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise SystemExit(f"trainer.threads={threads} failed:\n{done.stderr[-2000:]}")
        [summary] = Path(folder).rglob("summary.json")
        found = json.loads(summary.read_text())
    print(
        f"trainer.threads={threads}: {found['threads']} threads, "
        f"{found['tokens_per_s']:.0f} tokens/s, load {found['host_load_start']:.2f}",
        flush=True,
    )
    return {"setting": threads, **found}


def report(settings: list[int], runs: list[dict]) -> None:
    best = {s: max((r for r in runs if r["setting"] == s), key=tps) for s in settings}
    default = best[0]
    fastest = max((best[s] for s in settings if s), key=tps)
    load = sum(r["host_load_start"] for r in runs) / len(runs)
    print(
        f"default_vs_best={tps(fastest) / tps(default):.3f} threads_default={default['threads']} "
        f"threads_best={fastest['threads']} load={load:.2f}"
    )


def tps(found: dict) -> float:
    return found["tokens_per_s"]


if __name__ == "__main__":
    main()
