"""docs/plugins.md's worked examples run: each section's Python blocks, in order, as one module
whose folder holds the files its YAML blocks name (``# file: conf/<group>/<option>.yaml``) and
whose globals hold the test kit's ``xirang`` fixture (a section that trains uses it)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOC = ROOT / "docs" / "plugins.md"
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)
KINDS = (
    "Cost policy",
    "Device backend",
    "Parallel strategy",
    "Storage tier",
    "Comm option",
    "Scheduler and pool policy",
    "Model family",
    "Tokenizer",
    "Observer",
    "Learning-rate schedule and optimizer",
    "CLI command",
    "Tracker",
    "Planner",
    "Dataset",
)


def sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(), flags=re.M)[1:]
    return {part.split("\n", 1)[0].split(". ", 1)[-1]: part for part in parts}


def tutorials() -> list:
    found = []
    for title, text in sections().items():
        blocks = FENCE.findall(text)
        if any(lang == "python" for lang, _ in blocks):
            slug = re.sub(r"\W+", "_", title.lower()).strip("_")
            found.append(pytest.param(slug, blocks, id=slug))
    return found


def test_every_plugin_kind_has_a_section():
    assert [t for t in KINDS if t not in sections()] == []


@pytest.mark.parametrize(("slug", "blocks"), tutorials())
def test_the_worked_example_runs(slug, blocks, tmp_path, monkeypatch, xirang):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # a section may add its example's folder
    for lang, code in blocks:
        first = code.split("\n", 1)[0]
        if lang == "yaml" and first.startswith("# file: "):
            path = tmp_path / first.removeprefix("# file: ")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(code.split("\n", 1)[1])  # Hydra reads `# @package` up top
    module = types.ModuleType(f"xirang_tutorial_{slug}")
    module.__file__ = str(tmp_path / "__init__.py")
    module.xirang = xirang
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for lang, code in blocks:
        if lang == "python":
            exec(compile(code, f"{DOC}:{slug}", "exec"), module.__dict__)
