"""``xirang devices``: what each device backend finds here, with health and calibration."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from xirang import get_registry, help_text
from xirang.devices import datasheet


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xirang devices", description=help_text(__doc__))
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
        entry.update(_describe(backend, present, calibrate))
        report.append(entry)
    return report


def _describe(backend: Any, present: bool, calibrate: bool) -> dict[str, Any]:
    """Inventory, topology, health and (when usable) calibration; a failing probe is reported
    under ``errors`` instead of ending the listing. Hardware that is found but not usable (say,
    GPUs next to a CPU-only torch) is still listed, so the reason sits beside what it blocks."""
    probes: dict[str, Any] = {
        "devices": lambda: [asdict(d) for d in backend.inventory()],
        "topology": lambda: asdict(backend.topology()),
        "health": lambda: [asdict(h) for h in backend.health()],
    }
    if present:
        probes["calibration"] = lambda: asdict(backend.calibrate(refresh=calibrate))
    out: dict[str, Any] = {}
    for key, probe in probes.items():
        try:
            out[key] = probe()
        except Exception as exc:  # one broken probe must not hide the others
            out.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"
        if key == "devices" and not present and not out.get("devices"):
            return {}  # nothing of this family here: the reason says it all
    return out


def _print(report: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    for entry in report:
        if not entry["present"]:
            reason = escape(entry["reason"])
            console.print(f"[yellow]{entry['backend']}[/]: not available — {reason}")
            if not entry.get("devices"):
                continue
        table = Table(title=f"{entry['backend']} devices")
        for column in ("index", "model", "memory GiB", "driver", "runtime"):
            table.add_column(column)
        for d in entry.get("devices", []):
            table.add_row(
                str(d["index"]),
                d["model"],
                f"{d['memory_bytes'] / 2**30:.1f}",
                d["driver"] or "-",
                d["runtime"] or "-",
            )
        console.print(table)
        if entry.get("calibration"):
            _print_calibration(console, entry["calibration"])
        for group in entry.get("topology", {}).get("groups", []):
            devices = ",".join(map(str, group["devices"]))
            console.print(f"  link {group['name']} ({group['link']}): devices {devices}")
        for h in entry.get("health", []):
            where = "" if h["device"] is None else f" device {h['device']}"
            line = f"[{h['severity']}]{where} {h['check']}: {h['message']}"
            console.print(f"  health {escape(line)}")
        for key, error in entry.get("errors", {}).items():
            console.print(f"  [red]{key} failed[/]: {escape(error)}")


def _print_calibration(console: Any, cal: dict[str, Any]) -> None:
    """The best figures kept, each with the host's load when it was measured (a figure taken
    under load is below the device's peak, and is measured again until one was quiet)."""
    loads = cal.get("measured_load") or {}
    flops = ", ".join(
        f"{k} {v:.3f} TFLOP/s" + (f" at load {loads[k]:.2f}" if k in loads else "")
        for k, v in cal["matmul_tflops"].items()
    )
    link = cal.get("link_bandwidth_gbps")
    between = f"; device-to-device {link} GB/s" if link else ""
    console.print(
        f"  peak (best measured): {flops}; memory {cal['memory_bandwidth_gbps']} GB/s{between} "
        f"(last measured {cal['measured_at']})"
    )
    sheet = datasheet(cal["device_model"])
    if sheet:
        console.print(
            f"  datasheet peak: bfloat16 {sheet[0]:g} TFLOP/s (dense), what MFU is reported against"
        )
