"""MFU of the same run at different loads on the same host (issue 53): does the figure hold?

For each load in ``--loads`` (busy processes spinning on a core each, another developer's
jobs), trains the same small run (the embedded default model, ``--steps`` steps, the default
``trainer.threads``) as ``python -m xirang`` with no OpenMP settings in its environment, in
``--rounds`` rounds whose order rotates, so a spell of outside load lands on every setting
alike. Each run reads the device's peak from the shared calibration cache, as a user's run
does; the first run calibrates it if the cache has none. A load's figure is its median MFU
over the rounds (``summary.json``). The busy processes are stopped after each run, also on
failure.

Last line: ``mfu_min=<x> mfu_max=<y> mfu_spread=<max/min - 1> loads=<measured 1-minute loads at
the runs' starts> peak=<the peak's source>``; goal (issue 53): spread at most 0.15 over at
least five loads from 0 to 8.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from shared_node import rotated, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0,2,4,6,8", help="busy processes, each setting")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per run")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    loads = [int(n) for n in args.loads.split(",")]
    runs = [
        {"busy": busy, **loaded_run(busy, args.steps)}
        for r in range(args.rounds)
        for busy in rotated(loads, r)
    ]
    report(loads, runs)


def loaded_run(busy: int, steps: int) -> dict:
    """One default run while ``busy`` processes spin; its summary."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        time.sleep(5 if busy else 0)  # the busy processes take their cores first
        found = run(0, steps, False)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print(f"  {busy} busy: MFU {found['mfu'] * 100:.1f}% ({found['peak_source']})", flush=True)
    return found


def report(loads: list[int], runs: list[dict]) -> None:
    print(f"{'busy':>4} {'load':>6} {'tokens/s':>9} {'MFU':>7}")
    mfus = {}
    for busy in loads:
        mine = [r for r in runs if r["busy"] == busy]
        mfus[busy] = statistics.median(r["mfu"] for r in mine)
        load = statistics.mean(r["host_load_start"] for r in mine)
        tps = statistics.median(r["tokens_per_s"] for r in mine)
        print(f"{busy:>4} {load:>6.2f} {tps:>9.0f} {mfus[busy] * 100:>6.1f}%")
    low, high = min(mfus.values()), max(mfus.values())
    measured = ",".join(
        f"{statistics.mean(r['host_load_start'] for r in runs if r['busy'] == b):.1f}"
        for b in loads
    )
    sources = sorted({r["peak_source"] for r in runs})
    print(
        f"mfu_min={low:.4f} mfu_max={high:.4f} mfu_spread={high / low - 1:.3f} "
        f"loads={measured} peak={'|'.join(sources).replace(' ', '_')}"
    )


if __name__ == "__main__":
    main()
