"""The snapshot data pipeline (``data=stdlib|snapshot|mixture``) and ``xirang data``.

``xirang data prepare`` packs files into compressed columnar shards under a content-hashed
snapshot manifest, with a quality gate; a run pins a snapshot at launch, tokenises it once into
token shards, and every rank streams its rows through the storage tiers with a deterministic,
resumable shuffle (:class:`xirang_data.training.SnapshotDataset`). The ``data`` options live in
this plugin's ``conf/data``.
"""

from xirang import conf_folder, hookimpl
from xirang.specs import CommandSpec, DatasetSpec

_DATASET = "xirang_data.training:SnapshotDataset"
_SETTINGS = "xirang_data.dataset:DataSettings"


@hookimpl
def xirang_datasets() -> list[DatasetSpec]:
    return [
        DatasetSpec(
            name="stdlib",
            target=_DATASET,
            schema=_SETTINGS,
            description="the embedded corpus: this Python's standard library, prepared once",
        ),
        DatasetSpec(
            name="snapshot",
            target=_DATASET,
            schema=_SETTINGS,
            description="a prepared dataset root (xirang data prepare), pinned to one snapshot",
        ),
        DatasetSpec(
            name="mixture",
            target=_DATASET,
            schema=_SETTINGS,
            description="weighted snapshots; every global row's source follows from its number",
        ),
        DatasetSpec(
            name="chat",
            target="xirang_data.chat:ChatDataset",
            schema="xirang_data.chat_settings:ChatSettings",
            description="conversations (JSONL messages) for fine-tuning on assistant replies",
        ),
    ]


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="data",
            target="xirang_data.cli:main",
            description="prepare, list, sync and verify dataset snapshots",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
