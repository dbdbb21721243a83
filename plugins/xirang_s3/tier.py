"""The S3 tier: an s3fs filesystem configured from settings that never include a secret."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from xirang_core.errors import ConfigError
from xirang_core.storage.tier import FsspecTier

RETRY_MODES = ("standard", "adaptive", "legacy")


@dataclass
class S3Config:
    """``storage=s3_cache`` settings. Credentials are deliberately absent: use AWS_* variables
    or a profile in ~/.aws, which botocore reads itself."""

    root: str = ""  # s3://bucket/prefix for artefacts; datasets take theirs from data.uri
    endpoint_url: str = ""  # "" = AWS, or AWS_ENDPOINT_URL when set
    region: str = ""
    profile: str = ""  # a named profile of ~/.aws/config
    max_attempts: int = 10  # botocore attempts per request
    retry_mode: str = "adaptive"  # adaptive: client-side rate limiting when throttled
    max_pool_connections: int = 16


class S3Tier(FsspecTier):
    """Objects under ``s3://bucket/prefix``; writes are single PUTs, atomic on S3."""

    def __init__(self, root: str = "", **settings: Any) -> None:
        import s3fs

        cfg = S3Config(root=root, **settings)
        if cfg.retry_mode not in RETRY_MODES:
            raise ConfigError(
                f"storage.retry_mode={cfg.retry_mode!r}: valid: {', '.join(RETRY_MODES)}"
            )
        fs = s3fs.S3FileSystem(**filesystem_options(cfg))
        super().__init__(fs, root)

    def write(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(self.path(key), data)

    def __repr__(self) -> str:
        return f"S3Tier({self.root!r})"


def filesystem_options(cfg: S3Config) -> dict[str, Any]:
    """s3fs keyword arguments for ``cfg``: endpoint, region, profile and retry policy only."""
    client: dict[str, Any] = {}
    if cfg.endpoint_url:
        client["endpoint_url"] = cfg.endpoint_url
    if cfg.region:
        client["region_name"] = cfg.region
    options: dict[str, Any] = {
        "client_kwargs": client,
        "config_kwargs": {
            "retries": {"max_attempts": cfg.max_attempts, "mode": cfg.retry_mode},
            "max_pool_connections": cfg.max_pool_connections,
        },
        "use_listings_cache": False,
        "skip_instance_cache": True,
    }
    if cfg.profile:
        options["profile"] = cfg.profile
    return options
