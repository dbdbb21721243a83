"""``xirang devices``: what each device backend finds here, with health and calibration."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from xirang_core.plugins import get_registry


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xirang devices", description=__doc__)
    parser.add_argument("--calibrate", action="store_true", help="measure again, ignore the cache")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    report = survey(calibrate=args.calibrate)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print(report)
    return 0


def survey(calibrate: bool = False) -> list[dict[str, Any]]:
    """Each registered device backend: present or why not, and what it reports when present."""
    registry = get_registry()
    report = []
    for name in registry.names("device"):
        entry: dict[str, Any] = {"backend": name}
        try:
            backend = registry.load("device", name)()
            present, why = backend.detect()
        except Exception as exc:  # a backend that cannot even load is reported, not fatal
            entry.update(present=False, reason=f"{type(exc).__name__}: {exc}")
            report.append(entry)
            continue
        entry.update(present=present, reason=why)
        if present:
            entry["devices"] = [asdict(d) for d in backend.inventory()]
            entry["topology"] = asdict(backend.topology())
            entry["health"] = [asdict(h) for h in backend.health()]
            entry["calibration"] = asdict(backend.calibrate(refresh=calibrate))
        report.append(entry)
    return report


def _print(report: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for entry in report:
        if not entry["present"]:
            console.print(f"[yellow]{entry['backend']}[/]: not available — {entry['reason']}")
            continue
        table = Table(title=f"{entry['backend']} devices")
        for column in ("index", "model", "memory GiB", "driver", "runtime"):
            table.add_column(column)
        for d in entry["devices"]:
            table.add_row(str(d["index"]), d["model"], f"{d['memory_bytes'] / 2**30:.1f}",
                          d["driver"] or "-", d["runtime"] or "-")
        console.print(table)
        cal = entry["calibration"]
        flops = ", ".join(f"{k} {v:.3f} TFLOP/s" for k, v in cal["matmul_tflops"].items())
        console.print(f"  calibration: {flops}; memory {cal['memory_bandwidth_gbps']} GB/s "
                      f"(measured {cal['measured_at']})")
        for h in entry["health"]:
            console.print(f"  health [{h['severity']}] {h['check']}: {h['message']}")
