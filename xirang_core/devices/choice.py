"""Which device backend and collective a run uses: ``device=auto``'s choice and the process
group's backend. The launcher, the planner's cluster view and on-device checks all ask here, so
they agree (and the parallel package needs nothing from the run module above it)."""

from __future__ import annotations

import logging
from typing import Any

from xirang_core.errors import ConfigError
from xirang_core.plugins import Registry
from xirang_core.specs import DeviceBackend
from xirang_core.specs.kinds import AUTO

log = logging.getLogger("xirang.devices")


def pick_device(registry: Registry) -> str:
    """The highest-priority device backend whose hardware is present and usable. Hardware that
    is present but unusable (a torch build without its kernels, a driver too old) is never
    passed over silently: one warning line names it and why, then the next backend is taken."""
    specs = sorted(
        (registry.spec("device", n) for n in registry.names("device")),
        key=lambda s: -s.priority,
    )
    reasons = []
    for spec in specs:
        if spec.missing():
            reasons.append(f"{spec.name}: needs {', '.join(spec.missing())}")
            continue
        try:
            backend = registry.load("device", spec.name)()
            usable, why = backend.detect()
        except Exception as exc:  # detection must never take the run down
            backend, usable, why = None, False, f"{type(exc).__name__}: {exc}"
        if usable:
            return spec.name
        if backend is not None and backend.present()[0]:
            log.warning("device=auto: %s hardware is present but not usable: %s", spec.name, why)
        reasons.append(f"{spec.name}: {why}")
    raise ConfigError("device=auto found no usable device: " + "; ".join(reasons))


def collective_for(config: dict[str, Any], registry: Registry, backend: DeviceBackend) -> str:
    """The process-group backend of a run: the device's own, or what ``comm`` picks for it."""
    comm = config["comm"]
    if comm["name"] == AUTO:
        return backend.collective_backend()
    return registry.create("comm", comm).backend_for(backend.type)
