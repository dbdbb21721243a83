"""The S3 tier: an s3fs filesystem configured from settings that never include a secret."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from xirang import ConfigError
from xirang.data import FsspecTier

RETRY_MODES = ("standard", "adaptive", "legacy")
#: the variables through which botocore takes an endpoint other than AWS's own
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
#: seconds the one probe of an unconfigured endpoint may take to connect
PROBE_TIMEOUT_S = 5
#: (profile, region, bucket) whose default endpoint answered once in this process
_REACHED: set[tuple[str, str, str]] = set()


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
        check_default_endpoint(cfg, root)
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


def check_default_endpoint(cfg: S3Config, root: str) -> None:
    """With no endpoint configured, requests go to AWS. When AWS cannot be reached from here (an
    offline machine, or a store that was meant to be MinIO), botocore retries every request for
    about a minute before the run fails; one request without retries says so at once.

    An endpoint the user configured is left to the retries: it may be riding out an outage."""
    bucket = root.removeprefix("s3a://").removeprefix("s3://").split("/", 1)[0]
    key = (cfg.profile, cfg.region, bucket)
    configured = cfg.endpoint_url or any(os.environ.get(v) for v in ENDPOINT_VARIABLES)
    if configured or not bucket or key in _REACHED:
        return
    import botocore.session
    from botocore.config import Config
    from botocore.exceptions import ConnectionError as Unreachable

    session = botocore.session.Session(profile=cfg.profile or None)
    once = Config(
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=PROBE_TIMEOUT_S,
        read_timeout=PROBE_TIMEOUT_S,
    )
    client = session.create_client("s3", region_name=cfg.region or None, config=once)
    try:
        client.head_bucket(Bucket=bucket)
    except Unreachable as exc:
        raise ConfigError(
            f"{root}: storage.endpoint_url is not set, so S3 requests go to "
            f"{client.meta.endpoint_url}, which cannot be reached from here ({exc}). For an "
            f"S3-compatible store (MinIO, Ceph, moto) set storage.endpoint_url=http://HOST:PORT "
            f"(or AWS_ENDPOINT_URL)"
        ) from None
    except Exception:  # credentials, permissions, a missing bucket: the endpoint answered
        pass
    _REACHED.add(key)
