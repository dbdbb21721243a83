"""Cluster files: the pool's hardware, device throughputs and projects, as YAML or JSON.

    nodes:                       # explicit nodes ...
      - {name: a0, type: v100, devices: 8, domain_size: 4, leaf: l0, spine: s0}
    groups:                      # ... and/or generated ones
      - {type: p100, nodes: 16, devices: 8, nodes_per_leaf: 8, leaves_per_spine: 4}
    alibaba: path/to/openb_node_list_gpu_node.csv     # or nodes from the Alibaba 2023 trace
    throughputs:
      reference: v100            # one logical card = one v100 of the job's class
      speed: {v100: 1.0, p100: 0.6}                    # per type, for unmeasured classes
      classes: {resnet50: {v100: 7.8, p100: 4.9}}      # per (job class, device type)
      gavel: path/to/simulation_throughputs.json       # or Gavel's measured table
      prices: {v100: 2.5, p100: 1.5}                   # per device-hour (optional)
    projects:
      - {name: nlp, guaranteed: 64, borrow_limit: 128, team: research, max_priority: high,
         run_as: nlp-jobs,         # the Unix account its jobs run as (docs/pool.md)
         umask: "077",             # its jobs' umask (the default; shared_account: true lets
                                   # run_as name an account another project holds)
         max_jobs: 2000, max_payload_bytes: 33554432, rate: 20, burst: 40}   # limits

Relative paths resolve against the cluster file's folder.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import yaml

from xirang_service.pool.cards import Throughputs
from xirang_service.pool.cluster import Inventory
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import parse_priority
from xirang_service.pool.quota import Project, QuotaBook


def read(path: str | Path) -> dict[str, Any]:
    """Parse a cluster file into plain data with relative paths made absolute."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise PoolError(f"cluster file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise PoolError(f"cluster file {path} is not valid YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise PoolError(f"cluster file {path}: expected a mapping with 'nodes' or 'groups'")
    data["_base"] = str(path.parent)
    return data


#: the sections a cluster file may have, each a list of mappings or one mapping
SECTIONS = {"nodes": list, "groups": list, "projects": list, "throughputs": dict, "alibaba": str}
HELP = "see docs/pool.md (Cluster files)"


def build(data: dict[str, Any]) -> tuple[Inventory, Throughputs, QuotaBook]:
    """The cluster, its throughput table and its projects from parsed cluster-file data; an
    entry of the wrong shape is one error naming it, never a traceback."""
    _check_sections(data)
    base = Path(data.get("_base", "."))
    nodes = [_entry("nodes", i, node, dict) for i, node in enumerate(data.get("nodes") or [])]
    for i, group in enumerate(data.get("groups") or []):
        nodes.extend(_entry("groups", i, group, generate, len(nodes)))
    if data.get("alibaba"):
        nodes.extend(alibaba_nodes(base / data["alibaba"]))
    cluster = _entry("nodes", None, nodes, Inventory)
    spec = dict(data.get("throughputs") or {})
    if spec.get("gavel"):
        spec.setdefault("classes", {}).update(gavel_table(base / spec["gavel"]))
    throughputs = _entry("throughputs", None, spec, Throughputs.from_mapping, cluster.types)
    quotas = QuotaBook()
    for i, entry in enumerate(data.get("projects") or []):
        quotas.upsert(_entry("projects", i, entry, _project))
    return cluster, throughputs, quotas


def _check_sections(data: dict[str, Any]) -> None:
    unknown = sorted(set(data) - set(SECTIONS) - {"_base"})
    if unknown:
        raise PoolError(
            f"cluster file: unknown section {unknown[0]!r}; sections: "
            f"{', '.join(SECTIONS)} ({HELP})"
        )
    for key, kind in SECTIONS.items():
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            shape = {list: "a list of mappings", dict: "a mapping", str: "a path"}[kind]
            raise PoolError(f"cluster file: {key}: {value!r} is not {shape} ({HELP})")


def _entry(section: str, index: int | None, value: Any, make: Any, *args: Any) -> Any:
    """``make(value, *args)``, with a wrong shape or value refused as one line naming the
    entry (``projects[2]``) and what it held."""
    where = section if index is None else f"{section}[{index}]"
    if index is not None and not isinstance(value, dict):
        raise PoolError(f"cluster file: {where}: {value!r} is not a mapping ({HELP})")
    try:
        return make(value, *args)
    except PoolError as exc:
        raise PoolError(f"cluster file: {where}: {exc}") from None
    except (TypeError, ValueError, KeyError) as exc:
        raise PoolError(f"cluster file: {where}: {exc} ({HELP})") from None


def _project(entry: dict[str, Any]) -> Project:
    entry = {k: v for k, v in entry.items() if k != "shared_account"}  # the service's to check
    if "max_priority" in entry:  # a class name (normal, high, ...) in the file
        entry = {**entry, "max_priority": parse_priority(entry["max_priority"])}
    if isinstance(entry.get("umask"), str):  # "077": octal, as umask(1) reads it
        entry["umask"] = int(entry["umask"], 8) if entry["umask"].isdigit() else entry["umask"]
    return Project(**entry).check()


def shared_accounts(data: dict[str, Any]) -> set[str]:
    """The projects whose ``run_as`` the operator shares on purpose (``shared_account: true``)."""
    entries = data.get("projects") or []
    return {
        str(e.get("name")) for e in entries if isinstance(e, dict) and e.get("shared_account")
    }  # inside _entry: the error names the entry


def load(path: str | Path) -> tuple[Inventory, Throughputs, QuotaBook]:
    return build(read(path))


def generate(group: dict[str, Any], offset: int = 0) -> list[dict[str, Any]]:
    """Node specs for a homogeneous block of nodes under leaves and spines."""
    kind = str(group.get("type", "gpu"))
    count, per_leaf = int(group.get("nodes", 1)), int(group.get("nodes_per_leaf", 8))
    per_spine = int(group.get("leaves_per_spine", 4))
    prefix = str(group.get("prefix", kind))
    nodes = []
    for i in range(count):
        leaf = i // per_leaf
        nodes.append(
            {
                "name": f"{prefix}-{i:04d}",
                "type": kind,
                "devices": int(group.get("devices", 8)),
                "domain_size": int(group.get("domain_size", group.get("devices", 8))),
                "leaf": f"{prefix}-leaf{leaf}",
                "spine": f"{prefix}-spine{leaf // per_spine}",
            }
        )
    return nodes


def alibaba_nodes(path: Path, per_leaf: int = 16) -> list[dict[str, Any]]:
    """GPU nodes of the Alibaba 2023 cluster trace (``sn,cpu_milli,memory_mib,gpu,model``)."""
    nodes = []
    with open(path, newline="") as handle:
        for i, row in enumerate(csv.DictReader(handle)):
            if int(row["gpu"]) > 0:
                model = row["model"].lower()
                nodes.append(
                    {
                        "name": row["sn"],
                        "type": model,
                        "devices": int(row["gpu"]),
                        "leaf": f"{model}-leaf{i // per_leaf}",
                        "spine": f"{model}-spine{i // (per_leaf * 8)}",
                    }
                )
    return nodes


def gavel_table(path: Path, scale_factor: int = 1) -> dict[str, dict[str, float]]:
    """Gavel's measured solo throughput per (job type, device type) at one scale factor."""
    raw = json.loads(Path(path).read_text())
    table: dict[str, dict[str, float]] = {}
    for device_type, entries in raw.items():
        if "_" in device_type:  # the *_unconsolidated variants
            continue
        for key, value in entries.items():
            name, _, scale = key.strip("()").rpartition(", ")
            if int(scale) == scale_factor and value.get("null"):
                table.setdefault(name.strip("'"), {})[device_type] = float(value["null"])
    return table
