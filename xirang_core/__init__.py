"""The small core of xirang: hook specs, the plugin registry, config, and the run loop."""

from xirang_core.moved import install as _install_moved_names

_install_moved_names()
