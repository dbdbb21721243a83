"""The spec and data types plugins exchange with the core (see :mod:`xirang_core.specs`), and
the run's read-only config (:class:`RunConfig`; :func:`thaw` gives a writable copy of a part)."""

from xirang_core.contract import FrozenConfigError, RunConfig, thaw
from xirang_core.specs import *  # noqa: F403
from xirang_core.specs import __all__ as _core

__all__ = [*_core, "FrozenConfigError", "RunConfig", "thaw"]
