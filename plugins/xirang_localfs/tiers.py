"""Local disk and memory tiers."""

from __future__ import annotations

from dataclasses import dataclass

import fsspec

from xirang_core.storage.tier import FsspecTier


@dataclass
class LocalConfig:
    root: str = ""


class LocalTier(FsspecTier):
    def __init__(self, root: str) -> None:
        super().__init__(fsspec.filesystem("file"), root)


class MemoryTier(FsspecTier):
    def __init__(self, root: str = "/xirang") -> None:
        super().__init__(fsspec.filesystem("memory"), root)
