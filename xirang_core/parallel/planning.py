"""What ``parallel=auto`` asks of a planner plugin, and the settings of ``parallel=auto``.

The kernel knows the run's config, its model's shape and the machines it runs on; a planner
(the ``planner`` plugin kind, ``parallel.planner=<name>``) turns them into the plans that can
run, best first. The kernel takes the first, or with ``parallel.smoke=true`` has the top few
measured for a few steps (the hook ``xirang_measure_plans``) and takes the fastest, whichever
planner ranked them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from xirang_core.errors import ConfigError
from xirang_core.parallel.cluster import ClusterShape
from xirang_core.parallel.plan import ModelShape, ParallelPlan

#: the planner ``parallel=auto`` asks when the config names none (plugins/xirang_planner)
DEFAULT_PLANNER = "default"


@dataclass(frozen=True)
class PlanChoice:
    """A planner's answer: the plan it chose and every plan that fits, best first (``plan``
    among them, normally the first)."""

    plan: ParallelPlan
    ranking: tuple[ParallelPlan, ...]


@runtime_checkable
class Planner(Protocol):
    """Chooses how a run splits over its workers (``parallel=auto``).

    The class named by a ``PlannerSpec``'s ``target`` is built without arguments. ``choose``
    gets the validated run config (``trainer.nproc`` workers, ``trainer.global_batch``), the
    model's shape and the machines (this host's devices as the device plugin reports them);
    every plan it returns keeps the global batch. A planner that finds none raises
    :class:`~xirang_core.parallel.plan.PlanError` saying what would fit.
    """

    def choose(
        self, config: dict[str, Any], shape: ModelShape, cluster: ClusterShape
    ) -> PlanChoice: ...


@dataclass
class AutoConfig:
    """``parallel=auto``'s settings: the planner, and whether to confirm its top plans."""

    planner: str = DEFAULT_PLANNER
    smoke: bool = False  # run the top plans a few steps first, take the measured fastest
    smoke_top: int = 3
    smoke_steps: int = 3


def check_auto(
    values: dict[str, Any],
    planners: list[str],
    check_schema: Callable[[str, Any, type], dict[str, Any]],
    measures: bool = True,
) -> dict[str, Any]:
    """``parallel=auto``'s settings, typed; an unknown planner is named with the installed ones
    (the run would otherwise fail only after the workers' config was written), and
    ``parallel.smoke=true`` needs a plugin that ``measures`` plans (``xirang_measure_plans``)."""
    settings = check_schema(
        "parallel", {k: v for k, v in values.items() if k != "name"}, AutoConfig
    )
    if settings["planner"] not in planners:
        raise ConfigError(
            f"parallel.planner={settings['planner']}: no such planner. Valid: "
            f"{', '.join(planners) or 'none installed (pip install xirang)'}"
        )
    if settings["smoke_top"] < 1 or settings["smoke_steps"] < 1:
        raise ConfigError(
            f"parallel.smoke_top={settings['smoke_top']}, parallel.smoke_steps="
            f"{settings['smoke_steps']}: both must be at least 1"
        )
    if settings["smoke"] and not measures:
        raise ConfigError(
            "parallel.smoke=true: no installed plugin measures plans (the built-in planner "
            "plugin xirang_planner does); reinstall xirang or set parallel.smoke=false"
        )
    return {"name": values["name"], **settings}
