"""The package's layers stay one-way: a lower module never imports a higher one, not even
lazily inside a function or for type hints only, so each can be read, tested and replaced
without the module above it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import tomllib

import xirang_core

ROOT = Path(xirang_core.__file__).parent
#: import-linter's settings: the packages of the tree, the contracts
LINTER = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
ROOT_PACKAGES = LINTER["root_packages"]

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


def import_graph() -> dict[str, set[str]]:
    """Which module of the tree imports which: the kernel, the SDK, the service and every
    plugin (import-linter's root packages), wherever the import stands (a function-level import
    still ties two modules together), leaving out imports only type checkers read."""
    import grimp

    graph = grimp.build_graph(*ROOT_PACKAGES, exclude_type_checking_imports=True)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One circle of imports in ``graph`` (depth-first search), or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = 2
        path.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert a_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_every_package_of_the_tree_is_in_the_graph() -> None:
    """The kernel, the SDK, the service and each plugin under plugins/ (a new plugin missing
    from the root packages would go unchecked here and by lint-imports)."""
    plugins = {p.parent.name for p in (ROOT.parent / "plugins").glob("xirang_*/__init__.py")}
    assert {"xirang", "xirang_core", "xirang_service", *plugins} == set(ROOT_PACKAGES)


def test_the_layers_contract_places_every_kernel_room() -> None:
    """A kernel module or package outside the layers contract could import anything; each is
    placed, so an upward import anywhere in the kernel breaks ``lint-imports``."""
    [layers] = [c["layers"] for c in LINTER["contracts"] if c.get("containers") == ["xirang_core"]]
    placed = {room.strip() for layer in layers for room in re.split(r"[|:]", layer)}
    rooms = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"}
    rooms |= {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert sorted(rooms - placed) == []


def test_no_two_modules_of_the_tree_import_each_other_in_a_circle() -> None:
    """A circle makes each module in it need the others to be read, tested or replaced; the
    tree has none (config and overrides, config and the device choice, the pool's command line
    and the console's state once had one)."""
    assert a_cycle(import_graph()) == []
