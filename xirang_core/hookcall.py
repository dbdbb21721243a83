"""Calling observer hooks so that a failing one names itself.

pluggy calls every implementation of a hook in one go, and an exception from one of them
surfaces as a bare traceback that names neither the plugin nor the hook. Every run-event hook
goes through :func:`notify` instead: each implementation is called on its own, in pluggy's
order, and a failure becomes one :class:`PluginHookError` line ("plugin X: hook Y raised Z")
with the traceback in the run directory's ``plugin-errors.log``. An implementation marked
:func:`optional` only warns, and training goes on.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from xirang_core.errors import PluginError

log = logging.getLogger("xirang.plugins")

#: the file in the run directory that keeps the tracebacks of failed hooks
LOG_FILE = "plugin-errors.log"
_OPTIONAL = "xirang_optional"

F = TypeVar("F", bound=Callable[..., Any])


class PluginHookError(PluginError):
    """A plugin's hook raised during a run."""

    exit_code = 1


def optional(function: F) -> F:
    """Mark an observer hook whose failure must not stop training (a metrics exporter whose
    server went away): it is reported as a warning, and the run goes on."""
    setattr(function, _OPTIONAL, True)
    return function


def notify(hook: Any, name: str, *, tolerate: bool = False, **kwargs: Any) -> None:
    """Call every implementation of hook ``name`` (keyword arguments ``kwargs``, which hold
    ``ctx``). ``tolerate``: every failure only warns (the run is failing already)."""
    ctx = kwargs.get("ctx")
    for impl in reversed(getattr(hook, name).get_hookimpls()):  # pluggy's own call order
        try:
            impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
        except Exception as exc:
            message = report(impl.plugin_name, name, exc, getattr(ctx, "run_dir", None))
            if not (tolerate or getattr(impl.function, _OPTIONAL, False)):
                raise PluginHookError(message) from None
            log.warning("%s; the hook is optional, training goes on", message)


def report(plugin: str, hook: str, exc: BaseException, run_dir: str | None) -> str:
    """The one-line message, after appending the traceback to the run's log file."""
    where = ""
    if run_dir:
        path = Path(run_dir) / LOG_FILE
        with path.open("a") as out:
            out.write(f"plugin {plugin}, hook {hook}:\n")
            out.write("".join(traceback.format_exception(exc)) + "\n")
        where = f" (traceback in {path})"
    return f"plugin {plugin}: hook {hook} raised {type(exc).__name__}: {exc}{where}"
