"""Built-in plugins and examples import xirang only through its public SDK (``xirang.*``), so
a third-party plugin written like them relies only on names the SDK promises to keep, and the
kernel's modules stay free to move."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import xirang

REPO = Path(xirang.__file__).resolve().parent.parent
#: the trees whose code must read like a third-party plugin's
PLUGIN_TREES = ("plugins", "examples")
#: the packages behind the SDK, which a plugin must not import directly
PRIVATE = ("xirang_core", "xirang_service")
#: every SDK module a plugin may import from
SDK_MODULES = [
    "xirang",
    "xirang.checkpoint",
    "xirang.comm",
    "xirang.cost",
    "xirang.data",
    "xirang.devices",
    "xirang.launch",
    "xirang.model",
    "xirang.parallel",
    "xirang.planning",
    "xirang.pool",
    "xirang.specs",
    "xirang.sweep",
    "xirang.testing",
    "xirang.tracking",
    "xirang.worker",
]


def private_imports(path: Path, root: Path = REPO) -> list[str]:
    """``path:line: statement`` (``path`` relative to ``root``) for every import of a private
    package in ``path``, wherever it stands (module level, in a function, under
    ``TYPE_CHECKING``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        if any(name.split(".")[0] in PRIVATE for name in names):
            where = f"{path.relative_to(root)}:{node.lineno}"
            found.append(f"{where}: {ast.unparse(node)}")
    return found


def plugin_files() -> list[Path]:
    """Every Python file of the built-in plugins and the examples."""
    return sorted(f for tree in PLUGIN_TREES for f in (REPO / tree).rglob("*.py"))


def test_plugins_and_examples_import_only_the_sdk() -> None:
    files = plugin_files()
    assert len(files) > 100, f"found only {len(files)} files under {PLUGIN_TREES} in {REPO}"
    offenders = [line for f in files for line in private_imports(f)]
    assert offenders == [], "import these names from xirang.* instead:\n" + "\n".join(offenders)


def test_the_check_finds_imports_inside_functions(tmp_path: Path) -> None:
    plugin = tmp_path / "probe.py"
    plugin.write_text(
        "import xirang\n"
        "def load():\n"
        "    from xirang_core.plugins import get_registry\n"
        "    import xirang_service.pool.jobs as jobs\n"
    )
    assert private_imports(plugin, tmp_path) == [
        "probe.py:3: from xirang_core.plugins import get_registry",
        "probe.py:4: import xirang_service.pool.jobs as jobs",
    ]


@pytest.mark.parametrize("module", SDK_MODULES)
def test_every_sdk_name_resolves(module: str) -> None:
    sdk = importlib.import_module(module)
    assert sdk.__doc__, f"{module} has no docstring saying what it is for"
    missing = [name for name in sdk.__all__ if not hasattr(sdk, name)]
    assert missing == [], f"{module}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize(
    "module",
    [
        "xirang",
        "xirang.data",
        "xirang.devices",
        "xirang.launch",
        "xirang.planning",
        "xirang.pool",
        "xirang.cost",
    ],
)
def test_light_sdk_modules_import_no_torch(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'hydra') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", f"import {module} loads {out.stdout.strip()}"
