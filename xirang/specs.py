"""The spec and data types plugins exchange with the core (see :mod:`xirang_core.specs`)."""

from xirang_core.specs import *  # noqa: F403
from xirang_core.specs import __all__  # noqa: F401
