"""Local disk and memory tiers."""

from __future__ import annotations

import os
from dataclasses import dataclass

import fsspec

from xirang.data import FsspecTier


@dataclass
class LocalConfig:
    root: str = ""


class LocalTier(FsspecTier):
    """A folder; a relative root is made absolute so keys never depend on the working folder."""

    def __init__(self, root: str) -> None:
        super().__init__(fsspec.filesystem("file"), os.path.abspath(root) if root else root)


class MemoryTier(FsspecTier):
    """Process memory; ``memory://name`` and ``/name`` are the same root."""

    def __init__(self, root: str = "/xirang") -> None:
        super().__init__(
            fsspec.filesystem("memory"), "/" + root.removeprefix("memory://").strip("/")
        )
