"""``xirang data prepare`` on text as it comes: ``--encoding`` and ``--errors``, a UTF-8 BOM
dropped, NUL-laden and control-heavy samples quarantined with their reason (the real CLI)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from xirang_data import shards
from xirang_data.snapshot import load

from xirang.storage.locate import tier_for

STRAY = "caf\xe9 au lait".encode("latin-1")  # one byte that is not UTF-8


def prepare(src: Path, dst: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "xirang", "data", "prepare", str(src), str(dst), "--json"]
    return subprocess.run([*command, *flags], capture_output=True, text=True, timeout=300)


def texts(dst: Path) -> tuple[list[str], dict[str, str]]:
    """The trained texts, and each quarantined text's reason."""
    tier = tier_for(str(dst))
    snap = load(tier)
    trained = [t for s in snap.shards for t in shards.decode(tier.read(s.key))["text"].to_pylist()]
    held = shards.decode(tier.read(snap.quarantine[0].key)).to_pylist() if snap.quarantine else []
    return trained, {row["text"]: row["reason"] for row in held}


def test_text_files_as_they_come(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "plain.txt").write_text("plain text")
    (src / "bom.txt").write_bytes(b"\xef\xbb\xbfstarts with a byte-order mark")
    (src / "stray.txt").write_bytes(STRAY)
    (src / "utf16.txt").write_bytes("read as UTF-8".encode("utf-16-le"))
    (src / "escapes.txt").write_text("\x1b[31mred\x1b[0m " * 5)

    done = prepare(src, tmp_path / "strict")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["reasons"] == {"control_chars": 1, "not_utf8": 1, "nul_bytes": 1}
    assert report["files"] == {
        "control_chars": ["escapes.txt"],
        "not_utf8": ["stray.txt"],
        "nul_bytes": ["utf16.txt"],
    }
    trained, held = texts(tmp_path / "strict")
    assert sorted(trained) == ["plain text", "starts with a byte-order mark"]
    assert held["read as UTF-8".encode("utf-16-le").decode()] == "nul_bytes"
    assert set(held.values()) == set(report["reasons"])

    done = prepare(src, tmp_path / "replace", "--errors", "replace")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["reasons"] == {"control_chars": 1, "nul_bytes": 1}
    assert "caf\ufffd au lait" in texts(tmp_path / "replace")[0]


def test_encoding_reads_utf16_and_latin1(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes("caf\xe9 in UTF-16".encode("utf-16"))  # with its BOM
    done = prepare(src, tmp_path / "utf16", "--encoding", "utf-16")
    assert done.returncode == 0, done.stderr
    assert texts(tmp_path / "utf16")[0] == ["caf\xe9 in UTF-16"]
    (src / "a.txt").write_bytes(STRAY)
    done = prepare(src, tmp_path / "latin1", "--encoding", "latin-1")
    assert done.returncode == 0, done.stderr
    assert texts(tmp_path / "latin1")[0] == ["caf\xe9 au lait"]


def test_an_unknown_encoding_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("text")
    done = prepare(tmp_path / "a.txt", tmp_path / "out", "--encoding", "utf-9")
    assert done.returncode != 0
    assert "xirang error: --encoding utf-9: not an encoding" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_printed_report_names_each_dropped_file(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.txt").write_text("fine")
    (src / "broken.txt").write_bytes(STRAY)
    command = [sys.executable, "-m", "xirang", "data", "prepare", str(src), str(tmp_path / "d")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if "not_utf8" in line]
    assert "broken.txt" in row and "good.txt" not in done.stdout
