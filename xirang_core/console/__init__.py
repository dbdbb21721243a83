"""The web console and Prometheus endpoint over the pool's state and the cost store.

:mod:`~xirang_core.console.state` reads the pool store, :mod:`~xirang_core.console.view`
turns it into what pages show, :class:`~xirang_core.console.source.ConsoleSource` caches and
filters per viewer, :mod:`~xirang_core.console.server` serves pages, JSON and ``/metrics``.
"""
