"""The storage tier for a URL: the registered tier plugin whose protocols serve its scheme."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import fsspec

from xirang_core.errors import ConfigError, DataError, PluginError, XirangError
from xirang_core.storage.tier import FsspecTier


def protocol_of(url: str) -> str:
    proto = fsspec.utils.get_protocol(url)
    return "file" if proto in ("file", "local") else proto


def tier_for(url: str, storage: dict[str, Any] | None = None) -> FsspecTier:
    """A tier rooted at ``url``; ``storage`` (the run's storage option) supplies settings such as
    an S3 endpoint when its tier serves the URL's scheme."""
    from xirang_core.plugins import get_registry

    registry = get_registry()
    proto = protocol_of(url)
    names = registry.names("storage")
    served = [n for n in names if proto in registry.spec("storage", n).protocols]
    if not served:
        raise ConfigError(
            f"no storage tier serves {proto}:// (for {url}); installed tiers: {', '.join(names)}"
        )
    chosen = storage if storage and storage.get("name") in served else {"name": served[0]}
    root = url if proto != "file" else fsspec.utils.stringify_path(url).removeprefix("file://")
    tier = registry.create("storage", {**chosen, "root": root})
    if not isinstance(tier, FsspecTier):  # the readers use its filesystem and root directly
        raise PluginError(
            f"storage={chosen['name']} built a {type(tier).__name__}; data and checkpoints need "
            f"an FsspecTier (xirang_core.storage.tier) for {url}"
        )
    return tier


@contextlib.contextmanager
def origin_errors(url: str) -> Iterator[None]:
    """Turn a storage failure (no credentials, unreachable endpoint, denied) into one clear
    :class:`DataError`; the message names the URL and the error, never a credential."""
    try:
        yield
    except XirangError:
        raise
    except Exception as exc:
        if not _storage_error(exc):
            raise
        raise DataError(
            f"cannot read {url}: {type(exc).__name__}: {exc}. Check the endpoint "
            "(storage.endpoint_url or AWS_ENDPOINT_URL) and credentials (AWS_* variables, "
            "AWS_PROFILE or ~/.aws)"
        ) from None


def _storage_error(exc: BaseException) -> bool:
    modules = {c.__module__.split(".")[0] for c in type(exc).__mro__}
    return isinstance(exc, OSError) or bool(modules & {"botocore", "aiobotocore", "s3fs"})
