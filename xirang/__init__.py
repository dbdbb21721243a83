"""xirang: one training service over a pool of heterogeneous accelerators.

Plugins import what they need from here::

    from xirang import hookimpl, specs
"""

from importlib.metadata import PackageNotFoundError, version

from xirang import specs
from xirang_core.errors import ConfigError, DataError, PluginError, XirangError
from xirang_core.hookcall import optional
from xirang_core.hookspecs import hookimpl, hookspec
from xirang_core.plugins import conf_folder

try:
    __version__ = version("xirang")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "ConfigError",
    "DataError",
    "PluginError",
    "XirangError",
    "__version__",
    "conf_folder",
    "hookimpl",
    "hookspec",
    "optional",
    "specs",
]
