"""The web stack the pool service and the console share: uvicorn serving an ASGI app with
limits on connections, headers, bodies and time (:mod:`.server`, :mod:`.limits`), and the
validated field types and error answers of their APIs (:mod:`.fields`)."""

from __future__ import annotations

from xirang_core.errors import ConfigError


def require(what: str) -> None:
    """One clear error, before anything starts, when the web extra is not installed."""
    try:
        import fastapi  # noqa: F401
        import httptools  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            f"{what} needs the web stack ({exc.name} is not installed): pip install 'xirang[pool]'"
        ) from None
