"""Amazon S3 and S3-compatible object stores as a storage tier (``storage=s3_cache``).

Credentials come only from the standard AWS chain (environment variables, shared config and
credentials files, profiles, instance roles); the tier's settings hold no secret, so none can
reach a config file, a run directory or a log.
"""

from xirang import conf_folder, hookimpl
from xirang.specs import StorageTierSpec


@hookimpl
def xirang_storage_tiers() -> list[StorageTierSpec]:
    return [
        StorageTierSpec(
            name="s3",
            target="xirang_s3.tier:S3Tier",
            schema="xirang_s3.tier:S3Config",
            description="S3 or an S3-compatible store through s3fs; adaptive retries on SlowDown",
            requires=("s3fs",),
            install="pip install 'xirang[s3]'",
            protocols=("s3", "s3a"),
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
