"""Local storage tiers (``storage=local|memory``): a folder on disk or process memory."""

from xirang import conf_folder, hookimpl
from xirang.specs import StorageTierSpec


@hookimpl
def xirang_storage_tiers() -> list[StorageTierSpec]:
    return [
        StorageTierSpec(
            name="local",
            target="xirang_localfs.tiers:LocalTier",
            schema="xirang_localfs.tiers:LocalConfig",
            description="a folder on local disk or a shared filesystem mount",
            protocols=("file",),
        ),
        StorageTierSpec(
            name="memory",
            target="xirang_localfs.tiers:MemoryTier",
            schema="xirang_localfs.tiers:LocalConfig",
            description="process memory (fsspec memory filesystem); gone when the process ends",
            protocols=("memory",),
        ),
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
