"""xirang's test kit for plugin authors: a pytest plugin, loaded through ``pytest11``.

With xirang installed, every test can ask for the ``xirang`` fixture (a :class:`Kit`)::

    def test_my_schedule(xirang):
        xirang.use("xirang_restarts", path="src")       # the plugin under test, not installed
        xirang.check("schedule", "restarts")            # the registry entry meets its protocol
        config = xirang.compose("schedule=restarts")    # validated, as `python -m xirang` would
        run = xirang.train("schedule=restarts")         # a few real steps, in this process
        assert run.summary["steps"] == 4
        run = xirang.train("schedule=restarts", nproc=2)  # two workers (DDP over gloo)

This module imports neither torch nor Hydra until a fixture method needs them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest

from xirang_core.hookcall import notify
from xirang_core.lazy import lazy_names

if TYPE_CHECKING:  # loaded on first use, by __getattr__ below
    from xirang_core.config import compose

__all__ = [
    "QUICK",
    "Kit",
    "Run",
    "check_spec",
    "compose",
    "notify",
    "protocol_methods",
    "protocol_of",
    "registry_with",
]

#: what every kit run adds before the caller's overrides: a few fast steps
QUICK = (
    "trainer.max_steps=4",
    "trainer.log_every=2",
    "trainer.global_batch=4",
    "trainer.sample_tokens=0",
    "tokenizer=bytes",
)

# compose(overrides, registry), the validated config `python -m xirang OVERRIDES` would run,
# loads the config module (and OmegaConf) only when a test asks for it: pytest loads this module
# in every session through pytest11
__getattr__ = lazy_names(__name__, {"compose": "xirang_core.config"})


def protocol_of(kind: str, spec: Any) -> type:
    """The Protocol in :mod:`xirang_core.specs` that a registry entry of ``kind`` implements."""
    from xirang_core import specs
    from xirang_core.data.interface import Dataset
    from xirang_core.parallel.planning import Planner
    from xirang_service.pool.policy import PoolPolicySpec

    if isinstance(spec, PoolPolicySpec):
        return specs.PoolPolicy
    return {
        "device": specs.DeviceBackend,
        "parallel": specs.Strategy,
        "storage": specs.StorageTier,
        "comm": specs.CommBackend,
        "scheduler": specs.Scheduler,
        "cost": specs.CostPolicy,
        "model": specs.Model,
        "tokenizer": specs.Tokenizer,
        "command": specs.Command,
        "optimizer": specs.Optimizer,
        "schedule": specs.LRSchedule,
        "tracker": specs.Tracker,
        "policy": specs.PoolPolicy,
        "planner": Planner,
        "dataset": Dataset,
    }[kind]


def protocol_methods(protocol: type) -> list[str]:
    """The methods a protocol asks for (``__call__`` for a callable)."""
    names = [n for n, v in vars(protocol).items() if callable(v) or isinstance(v, classmethod)]
    return [n for n in names if (n == "__call__" or not n.startswith("_"))]


def check_spec(registry: Any, kind: str, name: str) -> Any:
    """Check the registry entry ``kind``/``name`` against its protocol and return the loaded
    implementation. An :class:`AssertionError` lists every problem: a schema that is not a
    dataclass, a method the protocol asks for that the implementation lacks."""
    spec = registry.spec(kind, name)
    target = registry.load(kind, name)
    protocol = protocol_of(kind, spec)
    problems = []
    schema = spec.load_schema()
    if schema is not None and not dataclasses.is_dataclass(schema):
        problems.append(f"schema {spec.schema} is not a dataclass")
    for method in protocol_methods(protocol):  # optional ones: the registry filled them
        if method == "__call__" and not isinstance(target, type):
            ok = callable(target)
        else:
            ok = callable(getattr(target, method, None))
        if not ok:
            problems.append(f"{spec.target} has no {method}() ({protocol.__name__} asks for it)")
    assert not problems, f"{kind} '{name}': " + "; ".join(problems)
    return target


def registry_with(*modules: str | ModuleType) -> Any:
    """A fresh registry of the installed plugins plus ``modules`` (imported by name, or module
    objects already in ``sys.modules``), in this process only: for a plugin's unit tests."""
    from importlib import metadata

    from xirang_core.plugins import ENTRY_POINT_GROUP, LocalEntryPoint, build_registry

    names = [m if isinstance(m, str) else m.__name__ for m in modules]
    local = [LocalEntryPoint(name=n.rsplit(".", 1)[-1], value=n) for n in names]
    return build_registry([*metadata.entry_points(group=ENTRY_POINT_GROUP), *local])


@dataclass
class Run:
    """What a kit training run left: its directory, summary and metrics, and, for a run on
    the command line, its exit status and output."""

    run_dir: Path | None
    returncode: int = 0
    output: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)


class Kit:
    """The ``xirang`` fixture: compose, train and check with the plugins a test names."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        self.runs = 0
        monkeypatch.setenv("XIRANG_RUNS", str(tmp_path / "runs"))
        self._reset()

    def use(self, module: str | ModuleType, path: str | Path | None = None) -> None:
        """Load ``module`` as a plugin (through ``XIRANG_PLUGINS``), in this process and in
        every worker it starts; ``path`` is a folder to import it from (a source tree)."""
        name = module if isinstance(module, str) else module.__name__
        if path is not None:
            folder = str(Path(path).resolve())
            self.monkeypatch.syspath_prepend(folder)
            parts = [folder, *filter(None, [os.environ.get("PYTHONPATH")])]
            self.monkeypatch.setenv("PYTHONPATH", os.pathsep.join(parts))
        extra = [*filter(None, [os.environ.get("XIRANG_PLUGINS")]), name]
        self.monkeypatch.setenv("XIRANG_PLUGINS", ",".join(extra))
        self._reset()

    @property
    def registry(self) -> Any:
        from xirang_core.plugins import get_registry

        return get_registry()

    def check(self, kind: str, name: str) -> Any:
        """:func:`check_spec` on this registry."""
        return check_spec(self.registry, kind, name)

    def compose(self, *overrides: str) -> dict[str, Any]:
        """The validated config ``python -m xirang OVERRIDES`` would train."""
        from xirang_core.config import compose

        return compose(list(overrides), self.registry)

    def train(self, *overrides: str, nproc: int = 1, in_process: bool | None = None) -> Run:
        """A few real training steps (:data:`QUICK`, then ``overrides``). One worker trains in
        this process; ``nproc`` workers (``parallel=ddp``) run through ``python -m xirang``,
        whose exit status and output the :class:`Run` keeps."""
        args = [*QUICK, *overrides]
        if nproc > 1:
            args = [f"trainer.nproc={nproc}", "parallel=ddp", *args]
        if in_process if in_process is not None else nproc == 1:
            return self._train_here(args)
        return self._train_command(args)

    def _train_here(self, args: list[str]) -> Run:
        from xirang_core.run import compose_config, train_in

        self.runs += 1
        run_dir = self.tmp_path / "runs" / f"kit-{self.runs}"
        run_dir.mkdir(parents=True)
        summary = train_in(compose_config(args), run_dir, self.registry)
        return Run(run_dir, summary=summary, metrics=_metrics(run_dir))

    def _train_command(self, args: list[str]) -> Run:
        done = subprocess.run(
            [sys.executable, "-m", "xirang", *args],
            cwd=self.tmp_path,
            env={**os.environ, "COLUMNS": "200"},
            capture_output=True,
            text=True,
        )
        dirs = sorted(p.parent for p in (self.tmp_path / "runs").rglob("config.yaml"))
        run_dir = next((d for d in reversed(dirs) if d.name != ".hydra"), None)
        summary_file = run_dir / "summary.json" if run_dir else None
        summary = (
            json.loads(summary_file.read_text()) if summary_file and summary_file.exists() else {}
        )
        return Run(
            run_dir,
            done.returncode,
            done.stdout + done.stderr,
            summary,
            _metrics(run_dir) if run_dir else [],
        )

    @staticmethod
    def _reset() -> None:
        """Forget the process-wide registry: the next use rebuilds it with the plugins named."""
        from xirang_core.plugins import get_registry

        get_registry.cache_clear()


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="session")
def xirang_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder for the session (prepared corpus, calibration), never the user's own:
    ``XIRANG_HOME`` where the suite sets one, else a fresh folder."""
    if os.environ.get("XIRANG_HOME"):
        return Path(os.environ["XIRANG_HOME"])
    home = tmp_path_factory.mktemp("xirang-home")
    os.environ["XIRANG_HOME"] = str(home)
    return home


@pytest.fixture
def xirang(xirang_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kit]:
    """The plugin test kit (see :class:`Kit`)."""
    kit = Kit(tmp_path, monkeypatch)
    yield kit
    monkeypatch.undo()
    kit._reset()
