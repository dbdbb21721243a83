"""Small prepared datasets for the data tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from xirang_data.prepare import PrepareSettings, prepare
from xirang_data.quality import Rules
from xirang_data.snapshot import Snapshot

from xirang.storage.locate import tier_for
from xirang_core.storage.tier import FsspecTier

Make = Callable[..., tuple[FsspecTier, Snapshot]]


def samples(n: int) -> list[dict]:
    """``n`` distinct samples whose text names their number (``sample 12 ...``)."""
    return [{"text": f"sample {i} " + "x" * (i % 17), "n": i} for i in range(n)]


@pytest.fixture
def make_dataset(tmp_path: Path) -> Make:
    """Prepare ``n`` samples into shards of ``per_shard`` under a fresh folder."""

    def make(
        n: int = 200, per_shard: int = 20, root: str | None = None
    ) -> tuple[FsspecTier, Snapshot]:
        tier = tier_for(root or str(tmp_path / "dataset"))
        settings = PrepareSettings(shard_samples=per_shard, progress=False)
        snap, _ = prepare(samples(n), tier, Rules(), settings, {"source": "test"})
        return tier, snap

    return make
