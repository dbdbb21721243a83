"""``data.val``: which documents evaluation scores: each source's tail (a share), or a
separate prepared dataset, every document of which is held out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules
from xirang_data.training import SnapshotDataset, run_batches

from xirang.storage.locate import tier_for
from xirang_core.errors import ConfigError


def dataset(root: Path, word: str, n: int) -> str:
    """A prepared dataset of ``n`` documents that say ``word``."""
    texts = [{"text": f"{word} {word} {i}"} for i in range(n)]
    tier = tier_for(str(root))
    prepare(texts, tier, Rules(), PrepareSettings(shard_samples=20, progress=False), {})
    return tier.root


def config(train: str, **data: object) -> dict:
    return {
        "seed": 3,
        "storage": {"name": "local", "root": ""},
        "tokenizer": {"name": "bytes", "separator": "\n\n"},
        "data": {"name": "snapshot", "uri": train, "seq_len": 16, **data},
    }


def text(batches, index: int) -> str:
    inputs, _ = batches.get(index)
    return bytes(inputs.flatten().tolist()).decode(errors="replace")


def test_a_separate_dataset_is_what_evaluation_scores(tmp_path: Path) -> None:
    train_root = dataset(tmp_path / "train", "quokka", 60)
    val_root = dataset(tmp_path / "val", "zebra", 20)
    run = config(train_root, val=val_root)
    train, val = run_batches(run, 0, 1, 4, 1)
    assert "zebra" in text(val, 0) and "quokka" not in text(val, 0)
    assert all("zebra" not in text(train, step) for step in range(1, 30))
    assert train.sources[0].source.n_val == 0  # the training data keeps every document
    pinned = SnapshotDataset().prepare(run).data  # as the launch pins it into config.yaml
    assert pinned["val_snapshot"]
    assert pinned["val_fraction"] == 0.0  # and that nothing of the training data is held out


def test_a_share_holds_out_the_tail_of_each_source(tmp_path: Path) -> None:
    root = dataset(tmp_path / "train", "quokka", 60)
    run = config(root, val=0.5, val_fraction=0.01)
    train, _ = run_batches(run, 0, 1, 4, 1)
    assert (train.sources[0].source.n_train, train.sources[0].source.n_val) == (30, 30)
    assert SnapshotDataset().prepare(run).data["val_fraction"] == 0.5


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"val": 1.5}, r"data.val=1.5: a share of documents must be in \(0, 1\)"),
        ({"val": 0.1, "val_fraction": 0.2}, r"data.val=0.1 and data.val_fraction=0.2 name two"),
        ({"val": "/elsewhere", "val_fraction": 0.2}, r"data.val=/elsewhere and data.val_fraction"),
    ],
)
def test_two_held_out_sets_or_a_bad_share_are_refused(
    tmp_path: Path, data: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        run_batches(config(str(tmp_path), **data), 0, 1, 4, 1)


def test_a_text_file_named_as_held_out_data_gets_a_prepare_command_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 53: ``data.val=notes.txt`` suggested ``xirang data prepare SRC notes.txt``
    (preparing into the text file); the hint's command, pasted, prepares it, and the folder
    it names then serves as data.val."""
    from xirang_core.cli import main

    train_root = dataset(tmp_path / "train", "quokka", 60)
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(f"zebra notes, paragraph {i}.\n\n" for i in range(30)))
    with pytest.raises(Exception, match="is a file, not a prepared dataset root") as refused:
        run_batches(config(train_root, val=str(notes)), 0, 1, 4, 1)
    command = str(refused.value).split("`")[1]
    assert command.startswith("xirang data prepare ")
    monkeypatch.chdir(tmp_path)
    assert main(command.split()[1:]) == 0
    prepared = str(tmp_path / "notes-prepared")
    _, val = run_batches(config(train_root, val=prepared), 0, 1, 4, 1)
    assert "zebra" in text(val, 0)


def test_the_launch_says_and_times_its_tokenizing(tmp_path: Path, capsys) -> None:
    """Issue 53: a first run spent a minute tokenising with no word of it; the launch names the
    snapshot, its shards and the tokenizer, shows a bar on a terminal, and says how long."""
    from xirang_data.training import pin_tokens
    from xirang_tokenizers.bytes import ByteTokenizer

    run = config(dataset(tmp_path / "train", "quokka", 60))
    pins = pin_tokens(run, ByteTokenizer("\n\n"))
    said = capsys.readouterr().err
    assert pins.data is not None
    snapshot = pins.data["snapshot"]
    assert f"tokenizing snapshot {snapshot} (" in said and "with tokenizer=bytes" in said
    assert re.search(rf"tokenized snapshot {snapshot} in \d+\.\d s", said), said
