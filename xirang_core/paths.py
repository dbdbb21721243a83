"""Where xirang keeps state that outlives a run."""

import os
from pathlib import Path


def xirang_home() -> Path:
    """The cache directory: ``XIRANG_HOME``, default ``~/.cache/xirang``."""
    return Path(os.environ.get("XIRANG_HOME") or Path.home() / ".cache" / "xirang")
