"""Compose a run's config outside ``python -m xirang`` (the plan command, smoke runs, tests)."""

from __future__ import annotations

from typing import Any

from xirang_core.plugins import Registry, get_registry


def compose_config(overrides: list[str], registry: Registry | None = None) -> dict[str, Any]:
    """The validated config ``python -m xirang OVERRIDES`` would run, as plain data."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from xirang_core.config import register_with_hydra, validate

    registry = registry or get_registry()
    register_with_hydra(registry)
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="xirang_conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return validate(cfg, registry)
