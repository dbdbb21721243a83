"""A plugin for tests (``XIRANG_PLUGINS=tests.modules_recorder``): after every other end-of-run
hook, the worker writes the names of the modules it has imported to ``modules.json`` in the run
directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from xirang import hookimpl

MODULES_FILE = "modules.json"


@hookimpl(trylast=True)  # after the other plugins' end-of-run hooks (the price book's metering)
def xirang_on_run_end(ctx: Any, summary: dict[str, Any]) -> None:
    (Path(ctx.run_dir) / MODULES_FILE).write_text(json.dumps(sorted(sys.modules)))
