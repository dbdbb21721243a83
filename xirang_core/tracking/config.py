"""The ``tracker`` config group, checked when the config is composed.

Several options may be chosen at once (``tracker=[tensorboard,mlflow]``): Hydra puts each
under ``tracker.<name>``. Each must name a registered tracker, and its settings must fit the
tracker's schema, before any worker starts.
"""

from __future__ import annotations

from typing import Any

from xirang_core.errors import ConfigError


def check_trackers(values: Any, registry: Any, check_schema: Any) -> dict[str, Any]:
    """The chosen trackers, validated; ``check_schema(section, settings, schema)`` is the
    core's typed check."""
    if not values:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(
            f"tracker: expected trackers chosen with tracker=[<name>,...], got {values!r}"
        )
    checked = {}
    for key, settings in values.items():
        name = settings.get("name") if isinstance(settings, dict) else None
        if name not in registry.names("tracker"):
            valid = ", ".join(registry.names("tracker")) or "none installed"
            raise ConfigError(f"tracker={name or key}: no such tracker. Valid trackers: {valid}")
        spec = registry.spec("tracker", name)
        if spec.missing():
            registry.load("tracker", name)  # raises the error naming what to install
        schema = spec.load_schema() if spec.schema else None
        options = {k: v for k, v in settings.items() if k != "name"}
        if schema is not None:
            options = check_schema(f"tracker.{key}", options, schema)
            # as a model family's: what types cannot say, through ``resolve(settings)``
            options = schema.resolve(options)
        checked[key] = {"name": name, **options}
    return checked
