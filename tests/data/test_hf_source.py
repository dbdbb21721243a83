"""A Hugging Face ``datasets`` dataset saved with ``save_to_disk`` as a prepare source."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow as pa
import pytest
from xirang_data import shards
from xirang_data.cli import main
from xirang_data.snapshot import load

from xirang.storage.locate import tier_for
from xirang_core.errors import DataError


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A saved dataset of 30 rows (two Arrow files) with a text and a number column."""
    rows = {"text": [f"document {i} " + "y" * i for i in range(30)], "n": list(range(30))}
    path = tmp_path / "hf"
    datasets.Dataset.from_dict(rows).save_to_disk(str(path), num_shards=2)
    return path


def test_a_saved_dataset_becomes_a_snapshot_of_its_rows(saved: Path, tmp_path: Path, capsys):
    dst = tmp_path / "dst"
    assert main(["prepare", str(saved), str(dst), "--json"]) == 0
    tier = tier_for(str(dst))
    snap = load(tier, json.loads(capsys.readouterr().out)["snapshot"])
    batch = pa.concat_tables(shards.decode(tier.read(s.key)) for s in snap.shards)
    assert sorted(batch.column("text").to_pylist()) == sorted(
        f"document {i} " + "y" * i for i in range(30)
    )
    assert sorted(batch.column("n").to_pylist()) == list(range(30))


def test_a_dataset_without_the_text_column_is_refused_naming_the_field(saved, tmp_path):
    with pytest.raises(
        DataError, match=r"--field body: dataset .* has no column 'body'; its columns: text, n"
    ):
        main(["prepare", str(saved), str(tmp_path / "dst"), "--field", "body"])


def test_a_folder_that_is_no_saved_dataset_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_text("text")
    with pytest.raises(DataError, match=r"--format hf\) is not a Hugging Face dataset"):
        main(["prepare", str(tmp_path / "plain"), str(tmp_path / "dst"), "--format", "hf"])


def test_a_dataset_dict_names_its_split_folders(saved: Path, tmp_path: Path) -> None:
    both = datasets.load_from_disk(str(saved))
    datasets.DatasetDict({"train": both, "test": both}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(DataError, match=r"DatasetDict of splits train, test; .*dd/train or"):
        main(["prepare", str(tmp_path / "dd"), str(tmp_path / "dst")])
