"""Clusters that are not here (DGX A100, H100, MI300X, Ascend 910B, ...), described in the
``cluster`` option files of this plugin's ``conf/`` and of any other plugin's, for ``xirang
plan cluster=<name>``."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import yaml

from xirang import ConfigError, get_registry
from xirang.planning import Cluster


def cluster_folders() -> list[Path]:
    """Where ``cluster`` options live: each plugin's config folder (this one's among them)."""
    paths = get_registry().config_search_paths()
    folders = [
        Path(p.removeprefix("file://")) / "cluster" for p in paths if p.startswith("file://")
    ]
    return [f for f in folders if f.is_dir()]


def cluster_names() -> list[str]:
    return sorted({p.stem for folder in cluster_folders() for p in folder.glob("*.yaml")})


def load_cluster(name: str, **overrides: Any) -> Cluster:
    """A described cluster by option name; ``overrides`` (e.g. ``nodes=4``) replace fields."""
    for folder in cluster_folders():
        path = folder / f"{name}.yaml"
        if path.exists():
            data = yaml.safe_load(path.read_text())
            return with_overrides(Cluster(**data), overrides)
    raise ConfigError(
        f"cluster={name}: no such cluster. Valid: local, {', '.join(cluster_names())}"
    )


def with_overrides(cluster: Cluster, overrides: dict[str, Any]) -> Cluster:
    known = {f.name: f.type for f in fields(Cluster)}
    bad = sorted(set(overrides) - set(known))
    if bad:
        raise ConfigError(f"cluster.{bad[0]}: no such field. Valid: {', '.join(known)}")
    typed = {k: type(getattr(cluster, k))(v) for k, v in overrides.items()}
    return replace(cluster, **typed)
