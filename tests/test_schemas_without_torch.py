"""Every plugin's settings schema imports without torch: a config is checked when it is
composed, so a bad value is refused in the time a typo is, not after loading torch (#33)."""

from __future__ import annotations

import subprocess
import sys

from xirang_core.plugins import get_registry

#: import one module in a fresh interpreter; say whether torch came with it
PROBE = "import importlib, sys; importlib.import_module(sys.argv[1]); print('torch' in sys.modules)"


def schema_modules() -> set[str]:
    registry = get_registry()
    return {
        spec.schema.split(":")[0]
        for kind in registry.specs
        for spec in registry.specs[kind].values()
        if spec.schema
    }


def imports_torch(module: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip() == "True"


def test_every_settings_schema_imports_without_torch():
    modules = schema_modules()
    assert {"xirang_gpt.config", "xirang_comm.settings"} <= modules  # the walk finds them
    assert sorted(m for m in modules if imports_torch(m)) == []
