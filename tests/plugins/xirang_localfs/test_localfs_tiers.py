"""The local and memory tiers: read, write, list, size and evict under a root."""

from __future__ import annotations

from pathlib import Path

import pytest

from xirang.storage.locate import tier_for
from xirang_core.plugins import get_registry


@pytest.mark.parametrize("root", ["local", "memory://xirang-test-tier"])
def test_objects_round_trip(root: str, tmp_path: Path) -> None:
    tier = tier_for(str(tmp_path / "t") if root == "local" else root)
    tier.write("shards/a.bin", b"alpha")
    tier.write("shards/b.bin", b"beta!")
    assert tier.read("shards/a.bin") == b"alpha"
    assert tier.list("shards") == ["shards/a.bin", "shards/b.bin"]
    assert tier.size("shards/b.bin") == 5
    tier.evict("shards/a.bin")
    assert not tier.exists("shards/a.bin") and tier.list() == ["shards/b.bin"]


def test_a_relative_root_is_made_absolute(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    tier = get_registry().create("storage", {"name": "local", "root": "data"})
    assert tier.root == str(tmp_path / "data")


def test_writes_leave_no_partial_object(tmp_path: Path) -> None:
    tier = tier_for(str(tmp_path))
    tier.write("k", b"x" * 1000)
    assert [p.name for p in tmp_path.iterdir()] == ["k"]


def test_unknown_scheme_names_the_installed_tiers() -> None:
    from xirang_core.errors import ConfigError

    with pytest.raises(ConfigError, match="local"):
        tier_for("gopher://nowhere/data")
