"""``xirang drill``: fault-injection drills a platform team runs on purpose.

    xirang drill kill [--times 3] [--seed 0] [-- hydra overrides]
    xirang drill corrupt | fail_save | storage | all

Each drill trains the same run twice, undisturbed and with faults injected (a random worker
killed at random steps, the newest checkpoint corrupted, a save failing midway, the storage
origin unreachable for a while), then reports whether the disturbed run recovered, how many
steps it recomputed, and whether its final weights are bitwise identical to the undisturbed
run's. The last line is machine-readable.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from xirang import ConfigError, help_text, xirang_home
from xirang.launch import read_events

SCENARIOS = ("kill", "corrupt", "fail_save", "storage")
#: a small, quick run unless the user overrides any of these
DEFAULTS = {
    "trainer.max_steps": "24",
    "trainer.nproc": "2",
    "parallel": "ddp",
    "trainer.log_every": "4",
    "trainer.sample_tokens": "0",
    "checkpoint.interval": "4",
    "checkpoint.keep": "4",
}


@dataclass
class DrillReport:
    drill: str
    recovered: bool
    restarts: int  # workers killed, each a restart of the whole run
    recomputed_steps: int
    identical: bool
    detail: str


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="xirang drill",
        description=help_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", choices=[*SCENARIOS, "all"])
    parser.add_argument("--times", type=int, default=3, help="kills per run (kill drill)")
    parser.add_argument("--seed", type=int, default=0, help="chooses the steps and workers")
    parser.add_argument(
        "--out", type=Path, help="folder for the runs (default: XIRANG_HOME/drills/<time>)"
    )
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both runs")
    args = parser.parse_intermixed_args(argv)
    overrides = with_defaults(args.overrides)
    out = args.out or default_out()
    print(f"drill: runs go to {out}", flush=True)
    baseline = out / "baseline"
    scenarios = SCENARIOS if args.scenario == "all" else (args.scenario,)
    print(f"drill: 1/{len(scenarios) + 1} the undisturbed run ...", flush=True)
    train_run(baseline, overrides, [])
    reports = []
    for i, name in enumerate(scenarios, start=2):
        print(f"drill: {i}/{len(scenarios) + 1} {name} ...", flush=True)
        rng = random.Random(args.seed)
        reports.append(run_drill(name, out / name, baseline, overrides, rng, args.times))
    _print(reports)
    return 0 if all(r.recovered and r.identical for r in reports) else 1


def default_out() -> Path:
    """Where drills keep their runs unless told: with xirang's other state, never the folder
    the command happened to be typed in."""
    return xirang_home() / "drills" / time.strftime("%Y%m%d-%H%M%S")


def with_defaults(overrides: list[str]) -> dict[str, str]:
    given = dict(_split(o) for o in overrides)
    return {**DEFAULTS, **given}


def _split(override: str) -> tuple[str, str]:
    if "=" not in override:
        raise ConfigError(f"{override!r}: overrides are key=value (e.g. trainer.max_steps=40)")
    key, value = override.split("=", 1)
    return key, value


def plan_faults(name: str, overrides: dict[str, str], rng: random.Random, times: int) -> dict:
    """The ``drill`` section for a scenario: steps and workers drawn from ``rng``."""
    steps = int(overrides["trainer.max_steps"])
    nproc = int(overrides["trainer.nproc"])
    every = _interval_steps(overrides)
    if steps < 2 * every + 2:
        raise ConfigError(f"trainer.max_steps={steps}: a drill needs at least {2 * every + 2}")
    middle = range(every + 1, steps)
    if name == "kill":
        picks = sorted(rng.sample(list(middle), min(times, len(middle))))
        return {"kill": [[s, rng.randrange(nproc)] for s in picks], "restarts": len(picks)}
    if name == "corrupt":  # after the second save, so there is an older one to fall back to
        return {"corrupt": [2 * every + 1], "restarts": 1}
    if name == "fail_save":
        return {"fail_save": [every], "kill": [[every + 1, 0]], "restarts": 1}
    start = every
    return {"storage_down": [start, start + every], "kill": [[start + every + 1, 0]], "restarts": 1}


def run_drill(
    name: str,
    run_dir: Path,
    baseline: Path,
    overrides: dict[str, str],
    rng: random.Random,
    times: int,
) -> DrillReport:
    faults = plan_faults(name, overrides, rng, times)
    restarts = faults.pop("restarts")
    extra = [
        f"trainer.max_restarts={restarts}",
        f"+drill={hydra_dict(faults)}",
    ]
    proc = train_run(run_dir, overrides, extra, check=False)
    events = read_events(run_dir)
    recovered = proc.returncode == 0 and (run_dir / "summary.json").exists()
    identical = recovered and same_weights(baseline, run_dir)
    detail = _describe(events) if recovered else _tail(proc)
    return DrillReport(
        name, recovered, _count(events, "restore"), recomputed(events), identical, detail
    )


def hydra_dict(values: dict[str, Any]) -> str:
    """``{key:[...],...}`` in Hydra's override grammar (keys unquoted, values JSON lists)."""
    items = ",".join(f"{k}:{json.dumps(v, separators=(',', ':'))}" for k, v in values.items())
    return "{" + items + "}"


def recomputed(events: list[dict[str, Any]]) -> int:
    """Steps trained twice: for each kill, from the checkpoint resumed to the step killed at."""
    total, killed_at = 0, None
    for event in events:
        if event["event"] == "kill":
            killed_at = event["step"] if killed_at is None else max(killed_at, event["step"])
        elif event["event"] == "restore" and killed_at is not None:
            total += killed_at - event["step"]
            killed_at = None
    return total + (killed_at or 0)


def same_weights(a: Path, b: Path) -> bool:
    """Whether the newest checkpoints of two runs hold bitwise-equal model tensors."""
    import torch  # torch and the checkpoint tools load only once a drill compares weights

    from xirang_ckpt.cli import open_store, pick_manifest
    from xirang_ckpt.export import model_tensors

    tensors = []
    for run in (a, b):
        store = open_store(str(run))
        tensors.append(model_tensors(store, pick_manifest(store, None)))
    return tensors[0].keys() == tensors[1].keys() and all(
        torch.equal(tensors[0][k], tensors[1][k]) for k in tensors[0]
    )


def train_run(
    run_dir: Path, overrides: dict[str, str], extra: list[str], check: bool = True
) -> Any:
    """One training run through the command line, into ``run_dir``."""
    args = [f"{k}={v}" for k, v in overrides.items()] + extra
    cmd = [sys.executable, "-m", "xirang", *args, f"hydra.run.dir={run_dir.resolve()}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise ConfigError(f"the undisturbed run failed: {_tail(proc)}")
    return proc


def _interval_steps(overrides: dict[str, str]) -> int:
    value = overrides["checkpoint.interval"]
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"checkpoint.interval={value}: a drill needs a fixed number of steps")
    return int(value)


def _count(events: list[dict[str, Any]], kind: str) -> int:
    return sum(e["event"] == kind for e in events)


def _describe(events: list[dict[str, Any]]) -> str:
    kinds = ("kill", "corrupt", "skip", "save_failed", "storage_down", "restore")
    return ", ".join(f"{k} x{_count(events, k)}" for k in kinds if _count(events, k))


def _tail(proc: Any) -> str:
    lines = (proc.stderr or proc.stdout or "").strip().splitlines()
    lines = [line for line in lines if line.strip() and "HYDRA_FULL_ERROR" not in line]
    return lines[-1] if lines else f"exit status {proc.returncode}"


def _print(reports: list[DrillReport]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="fault drills")
    for column in ("drill", "recovered", "restarts", "recomputed steps", "identical", "what"):
        table.add_column(column)
    for r in reports:
        table.add_row(
            r.drill,
            _yes(r.recovered),
            str(r.restarts),
            str(r.recomputed_steps),
            _yes(r.identical),
            r.detail,
        )
    Console().print(table)
    print(
        " ".join(
            f"{r.drill}:recovered={r.recovered},identical={r.identical},"
            f"recomputed={r.recomputed_steps}"
            for r in reports
        )
    )
    print(json.dumps([asdict(r) for r in reports]))


def _yes(flag: bool) -> str:
    return "[green]yes[/]" if flag else "[red]no[/]"
