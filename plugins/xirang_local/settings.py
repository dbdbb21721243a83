"""``scheduler=local``'s settings, apart from the scheduler: checked when the run's config is
composed (a quota this machine cannot give, or a binding it does not know, is refused then),
without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xirang.launch import check_quota
from xirang_local.binding import check_bind


@dataclass
class LocalConfig:
    """``scheduler=local``'s settings (checked at compose)."""

    #: CPU counts, one per worker on this node, each worker's cgroup CPU quota
    #: (:mod:`xirang_local.quota`); empty: no quota
    worker_quota: list[float] = field(default_factory=list)
    #: ``cores``: each worker on CPUs of its own (:mod:`xirang_local.binding`); ``none``: the
    #: kernel places them
    cpu_bind: str = "none"

    @staticmethod
    def resolve(settings: dict[str, Any]) -> dict[str, Any]:
        """The composed ``scheduler`` section, its quotas checked against this machine."""
        check_quota(settings.get("worker_quota") or [])
        check_bind(settings.get("cpu_bind", "none"))
        return settings
