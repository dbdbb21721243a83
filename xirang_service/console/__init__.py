"""The web console and Prometheus endpoint over the pool's state and the cost store.

:mod:`~xirang_service.console.state` reads the pool store, :mod:`~xirang_service.console.view`
turns it into what pages show, :class:`~xirang_service.console.source.ConsoleSource` caches and
filters per viewer, :mod:`~xirang_service.console.server` serves pages, JSON and ``/metrics``.
"""
