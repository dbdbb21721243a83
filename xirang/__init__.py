"""xirang: one training service over a pool of heterogeneous accelerators.

This package is the stable surface for plugin authors: built-in plugins and examples import
only ``xirang`` and its submodules, never ``xirang_core`` or ``xirang_service``. The names in
``__all__`` here are the ones every plugin needs; the submodules group the rest by concept
(``xirang.specs``, ``xirang.model``, ``xirang.parallel``, ``xirang.devices``, ``xirang.comm``,
``xirang.data``, ``xirang.launch``, ``xirang.worker``, ``xirang.tracking``, ``xirang.sweep``,
``xirang.pool``, ``xirang.cost``, ``xirang.testing``). Importing this package imports neither
torch nor Hydra; the submodules that need torch say so::

    from xirang import hookimpl, specs
"""

from xirang import specs
from xirang_core import installed_version
from xirang_core.errors import ConfigError, DataError, PluginError, XirangError, peer_lost
from xirang_core.hookcall import optional
from xirang_core.hookspecs import hookimpl, hookspec
from xirang_core.paths import replace_text, xirang_home
from xirang_core.plugins import conf_folder, get_registry
from xirang_core.terminal import help_text

__version__ = installed_version()

__all__ = [
    "ConfigError",
    "DataError",
    "PluginError",
    "XirangError",
    "__version__",
    "conf_folder",
    "get_registry",
    "help_text",
    "hookimpl",
    "hookspec",
    "optional",
    "peer_lost",
    "replace_text",
    "specs",
    "xirang_home",
]
