"""``xirang data``: prepare, snapshots, sync and verify as a user types them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from xirang_data.cli import main
from xirang_data.snapshot import load

from xirang.storage.locate import tier_for
from xirang_core.errors import DataError


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "nested").mkdir(parents=True)
    for i in range(40):
        (src / "nested" / f"{i}.txt").write_text(f"file number {i}")
    (src / "empty.txt").write_text("")
    (src / "rows.jsonl").write_text("\n".join(json.dumps({"text": f"row {i}"}) for i in range(5)))
    return src


def test_prepare_then_list_sync_and_verify(source: Path, tmp_path: Path, capsys) -> None:
    dst, copy = tmp_path / "dst", tmp_path / "copy"
    assert main(["prepare", str(source), str(dst), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["accepted"] == 45 and made["reasons"] == {"empty": 1}
    assert main(["snapshots", str(dst)]) == 0
    assert made["snapshot"] in capsys.readouterr().out
    assert main(["sync", str(dst), str(copy)]) == 0
    assert "moved 2 shards" in capsys.readouterr().out  # one training shard, one quarantine
    assert main(["sync", str(dst), str(copy)]) == 0
    assert "moved 0 shards" in capsys.readouterr().out
    assert main(["verify", str(copy)]) == 0
    shard = next((copy / "shards").iterdir())
    shard.write_bytes(shard.read_bytes()[:-1])
    assert main(["verify", str(copy)]) == 1
    assert shard.name in capsys.readouterr().out
    good = (dst / "shards" / shard.name).read_bytes()
    shard.write_bytes(bytes([good[0] ^ 1]) + good[1:])  # same size, other bytes
    assert main(["sync", str(dst), str(copy)]) == 0
    assert "moved 1 shards" in capsys.readouterr().out and shard.read_bytes() == good
    assert main(["verify", str(copy)]) == 0


def test_a_snapshot_file_holding_another_snapshots_manifest_is_refused(
    source: Path, tmp_path: Path, capsys
) -> None:
    dst = tmp_path / "dst"
    ids = []
    for extra in ("", "more"):
        (source / "extra.txt").write_text(extra or "x")
        assert main(["prepare", str(source), str(dst), "--json"]) == 0
        ids.append(json.loads(capsys.readouterr().out)["snapshot"])
    manifests = dst / "snapshots"
    (manifests / f"{ids[0]}.json").write_text((manifests / f"{ids[1]}.json").read_text())
    with pytest.raises(DataError, match=rf"holds the manifest of snapshot {ids[1]}, not {ids[0]}"):
        load(tier_for(str(dst)), ids[0])


def test_missing_source_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        main(["prepare", str(tmp_path / "nope"), str(tmp_path / "dst")])


def test_registered_as_a_subcommand() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "xirang", "data", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "snapshots" in done.stdout


def test_snapshots_fit_80_columns(source: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    from rich.console import Console
    from xirang_data import cli

    from tests.test_narrow_terminal import fits

    dst = tmp_path / "dst"
    assert main(["prepare", str(source), str(dst), "--json"]) == 0
    snapshot = json.loads(capsys.readouterr().out)["snapshot"]
    monkeypatch.setattr(cli, "console", Console(width=80, highlight=False))
    assert main(["snapshots", str(dst)]) == 0
    out = capsys.readouterr().out
    assert fits(out) and "quarantined" in out, out  # every header and figure whole
    assert f"{snapshot} source: {source}" in out.replace("\n", "")  # the path, folded below
