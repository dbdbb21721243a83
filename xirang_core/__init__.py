"""The small core of xirang: hook specs, the plugin registry, config, and the run loop."""

from importlib import metadata


def installed_version() -> str:
    """The version of the installed distribution ``xirang``, read from its metadata so that
    pyproject.toml's ``version`` is the only place it is written; ``0+unknown`` for a source
    tree that was never installed."""
    try:
        return metadata.version("xirang")
    except metadata.PackageNotFoundError:
        return "0+unknown"
