"""``python -m xirang`` from any folder, and a default whose plugin is disabled (issue 20)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _xirang(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "xirang", *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_folder_holding_another_xirang_directory_does_not_shadow_it(tmp_path: Path) -> None:
    (tmp_path / "xirang").mkdir()  # e.g. the parent folder of a checkout named xirang
    done = _xirang("--cfg", "job", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "name: llama_tiny" in done.stdout and "cost" in done.stdout


def test_a_disabled_plugin_that_provides_a_default_is_named(tmp_path: Path) -> None:
    done = _xirang("--cfg", "job", cwd=tmp_path, XIRANG_DISABLE_PLUGINS="llama")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "model=llama_tiny (the default) comes from plugin 'llama'" in done.stderr
    assert "XIRANG_DISABLE_PLUGINS" in done.stderr and "gpt_tiny" in done.stderr
