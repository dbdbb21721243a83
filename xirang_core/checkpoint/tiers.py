"""Where a run's checkpoints live: a path or URL opened through the storage tiers."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import fsspec

from xirang_core.storage.tier import FsspecTier

log = logging.getLogger("xirang.checkpoint")
CHECKPOINT_DIR = "checkpoints"


def checkpoint_uri(settings_uri: str, run_dir: str) -> str:
    """``checkpoint.uri``, or ``<run dir>/checkpoints`` when it is empty."""
    return settings_uri or str(Path(run_dir) / CHECKPOINT_DIR)


def open_tier(uri: str, storage: dict[str, Any] | None = None, registry: Any = None) -> FsspecTier:
    """A tier rooted at ``uri``: the run's storage plugin when it serves the URL's protocol
    (so its credentials and endpoint settings apply), else any plugin that does, else plain
    fsspec."""
    protocol = fsspec.utils.get_protocol(uri)
    for settings in _tier_candidates(protocol, storage, registry):
        try:
            return registry.create("storage", {**settings, "root": uri})
        except Exception as exc:  # a plugin that cannot take this root: say so, fall back
            log.warning("storage=%s cannot open %s (%s); using fsspec", settings["name"], uri, exc)
    fs, root = fsspec.core.url_to_fs(uri)
    return FsspecTier(fs, root)


def _tier_candidates(
    protocol: str, storage: dict[str, Any] | None, registry: Any
) -> list[dict[str, Any]]:
    if registry is None:
        return []
    names = registry.names("storage")
    serves = [n for n in names if protocol in registry.spec("storage", n).protocols]
    if storage and storage.get("name") in serves:
        return [storage]
    return [{"name": n} for n in serves[:1]]
