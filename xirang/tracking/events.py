"""Experiment trackers: what every tracker plugin's run-event hooks do.

A tracker plugin registers a :class:`~xirang_core.specs.TrackerSpec` and implements the run-event
hooks by handing each to the function of the same name here, with its tracker's name. These
functions do what every tracker needs and none should write again: act only when the run
selected the tracker (``tracker=[tensorboard,mlflow]``) and only on the main worker, run the
tracker on a thread of its own, send each logged step exactly once (a restarted or resumed run
skips the steps its tracker already holds), continue the tracker's run id kept in the run
directory, and turn a failing tracker into one warning while training goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xirang.tracking.session import TrackerSession
from xirang_core.contract import RunConfig
from xirang_core.hookspecs import hookimpl
from xirang_core.specs import JsonValue, WorkerContext

#: the open session of each (tracker, run directory) in this process
_SESSIONS: dict[tuple[str, str], TrackerSession] = {}


def selected(config: Any) -> dict[str, dict[str, Any]]:
    """The trackers a run's config selects, by name, with their settings."""
    return dict((config or {}).get("tracker") or {})


def on_run_start(name: str, ctx: WorkerContext, config: RunConfig) -> None:
    """Open ``name``'s session on the main worker when the run selects it."""
    settings = selected(config).get(name)
    if settings is None or not ctx.is_main:
        return
    from xirang_core.plugins import get_registry

    tracker = get_registry().create("tracker", settings)
    session = TrackerSession(name, tracker, Path(ctx.run_dir))
    _SESSIONS[(name, ctx.run_dir)] = session
    session.start(config)


def on_step_end(name: str, ctx: WorkerContext, step: int, metrics: dict[str, float]) -> None:
    session = _SESSIONS.get((name, ctx.run_dir))
    if session is not None:
        session.log(step, metrics)


def on_run_end(name: str, ctx: WorkerContext, summary: dict[str, JsonValue]) -> None:
    session = _SESSIONS.pop((name, ctx.run_dir), None)
    if session is not None:
        session.finish(summary)


def on_fault(name: str, ctx: WorkerContext, error: BaseException) -> None:
    """The run is failing: the tracker marks its run failed (a restart continues it)."""
    session = _SESSIONS.pop((name, ctx.run_dir), None)
    if session is not None:
        session.finish(None)


def run_event_hooks(name: str) -> tuple[Callable[..., None], ...]:
    """The four run-event hooks of tracker ``name``, for its plugin module to bind::

        xirang_on_run_start, xirang_on_step_end, xirang_on_fault, xirang_on_run_end = (
            run_event_hooks("mytracker")
        )

    Every tracker hands the same events to this module, so no plugin writes them again."""

    @hookimpl
    def xirang_on_run_start(ctx: WorkerContext, config: RunConfig) -> None:
        on_run_start(name, ctx, config)

    @hookimpl
    def xirang_on_step_end(ctx: WorkerContext, step: int, metrics: dict[str, float]) -> None:
        on_step_end(name, ctx, step, metrics)

    @hookimpl
    def xirang_on_fault(ctx: WorkerContext, error: BaseException) -> None:
        on_fault(name, ctx, error)

    @hookimpl
    def xirang_on_run_end(ctx: WorkerContext, summary: dict[str, JsonValue]) -> None:
        on_run_end(name, ctx, summary)

    return xirang_on_run_start, xirang_on_step_end, xirang_on_fault, xirang_on_run_end


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config as dotted keys (``trainer.max_steps``), for a tracker's parameters."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat
