"""The package's layers stay one-way: a lower module never imports a higher one, not even
lazily inside a function or for type hints only, so each can be read, tested and replaced
without the module above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xirang_core

ROOT = Path(xirang_core.__file__).parent

#: (module, what it must not import): each pair was an import circle or an upward import
FORBIDDEN = [
    ("xirang_service.cost.budgets", "xirang_service.cost.store"),
    ("xirang_service.cost.budgets", "xirang_service.cost.governor"),
    ("xirang_service.pool.policy", "xirang_service.pool.engine"),
    ("xirang_core.parallel", "xirang_core.run"),
    ("xirang_core.devices", "xirang_core.run"),
]


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement stands."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def files_of(module: str) -> list[Path]:
    """The source files of ``module`` (a package: all of its files)."""
    base = ROOT.parent.joinpath(*module.split("."))
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


@pytest.mark.parametrize(("module", "above"), FORBIDDEN)
def test_a_lower_module_never_imports_the_one_above(module: str, above: str) -> None:
    files = files_of(module)
    assert files and all(f.exists() for f in files), module
    offenders = [
        str(f.relative_to(ROOT.parent))
        for f in files
        if any(name == above or name.startswith(above + ".") for name in imports_of(f))
    ]
    assert offenders == [], f"{', '.join(offenders)} import(s) {above}"
