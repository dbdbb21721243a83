"""``xirang plugins``: every plugin, its distribution and version, what it registers, the config
options it adds, the hooks it implements, and what is usable here."""

from __future__ import annotations

import argparse
import json
from typing import Any

from xirang_core.plugins import Registry, get_registry
from xirang_core.terminal import help_text


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="xirang plugins", description=help_text(__doc__))
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    registry = get_registry()
    rows = describe(registry)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        _print_table(rows)
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def describe(registry: Registry) -> list[dict[str, Any]]:
    """One record per plugin, with one entry per implementation it registers."""
    options: dict[str, list[str]] = {}
    for (group, option), shipped in sorted(registry.option_files().items()):
        for owner in dict.fromkeys(record.name for record, _ in shipped):
            options.setdefault(owner, []).append(f"{group}/{option}")
    rows = []
    for record in registry.plugins.values():
        rows.append(
            {
                "plugin": record.name,
                "module": record.module,
                "distribution": record.distribution,
                "version": record.version,
                "status": record.status,
                "error": record.error,
                "options": options.get(record.name, []),
                "hooks": record.hooks,
                "registers": [_describe_spec(registry, record.name, s) for s in record.registers],
            }
        )
    return rows


def _describe_spec(registry: Registry, plugin: str, spec: Any) -> dict[str, Any]:
    """Available = importable, not claimed twice, its programs on PATH and, for a device
    backend, its hardware present: the same reason ``xirang devices`` gives when it is not."""
    missing = spec.missing()
    conflict = registry.conflicts.get((spec.kind, spec.name))
    reason = ""
    if missing:
        reason = f"needs {', '.join(missing)}" + (
            f"; install: {spec.install}" if spec.install else ""
        )
    elif conflict:
        reason = f"also registered by {' and '.join(p for p in conflict if p != plugin)}"
    elif spec.missing_tools():
        reason = f"installed, not usable here: {', '.join(spec.missing_tools())} not on PATH"
    elif spec.kind == "device":
        reason = _no_device(registry, spec.name)
    return {
        "kind": spec.kind,
        "name": spec.name,
        "description": spec.description,
        "installed": not missing,
        "available": not reason,
        "reason": reason,
    }


def _no_device(registry: Registry, name: str) -> str:
    """Why the backend finds no device here ("" when it does), from its torch-free ``present``
    check (the vendor's library or tool); ``xirang devices`` adds torch's view of them."""
    try:
        backend = registry.load("device", name)()
        found, why = backend.present()
    except Exception as exc:  # a backend that cannot load or probe is listed, not fatal
        found, why = False, f"{type(exc).__name__}: {exc}"
    return "" if found else f"installed, no device: {why}"


#: below this width the version column goes (every built-in shares the distribution's)
WIDE = 120


def _print_table(rows: list[dict[str, Any]]) -> None:
    """Names never wrap or truncate; the notes column takes what the terminal has left and
    wraps, so the table fits an 80-column terminal."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    wide = console.width >= WIDE
    table = Table(
        title="xirang plugins", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    for column in ("plugin", "version", "kind", "name", "usable"):
        if column != "version" or wide:
            table.add_column(column, no_wrap=True)
    table.add_column("notes", overflow="fold")
    for row in rows:
        version = [row["version"] or "-"] if wide else []
        if row["status"] != "loaded" or row["error"]:
            style = "red" if row["status"] == "failed" else "yellow"
            table.add_row(
                row["plugin"], *version, "-", "-", row["status"], row["error"], style=style
            )
        origin = f"{row['distribution'] or '?'} {row['version']}".strip()
        hooks = " ".join(h.removeprefix("xirang_") for h in row["hooks"])
        table.add_row(row["plugin"], *version, "plugin", "-", "", f"{origin}; hooks: {hooks}")
        if row["options"]:
            table.add_row(row["plugin"], *version, "options", "-", "", " ".join(row["options"]))
        for item in row["registers"]:
            table.add_row(
                row["plugin"],
                *version,
                item["kind"],
                item["name"],
                "yes" if item["available"] else "[red]no[/]",
                item["reason"] or item["description"],
            )
    console.print(table)
