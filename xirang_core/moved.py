"""Modules that left the kernel stay importable under their old names for one release.

``xirang_core.pool``, ``.cost``, ``.console`` and ``.web`` moved to :mod:`xirang_service`;
the snapshot pipeline's modules of ``xirang_core.data`` to the dataset plugin ``xirang_data``;
the device SDK's modules of ``xirang_core.devices`` to :mod:`xirang.devices`.
A plugin written against the old names still loads: importing one warns
(``DeprecationWarning``) and returns the very module object of the new name, so state, classes
and ``isinstance`` checks are shared rather than duplicated.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

_STORAGE = ("cache", "local_s3", "locate", "retry")

#: old package prefix -> new package prefix
MOVED = {f"xirang_core.{n}": f"xirang_service.{n}" for n in ("pool", "cost", "console", "web")}
# the automatic planner (parallel=auto, xirang plan) became the plugin xirang_planner
MOVED.update(
    {
        f"xirang_core.parallel.{n}": f"xirang_planner.{n}"
        for n in ("calibrate", "timing", "simulate", "planner", "command")
    }
)
#: the snapshot pipeline left xirang_core.data for the dataset plugin xirang_data
MOVED |= {
    f"xirang_core.data.{n}": f"xirang_data.{n}"
    for n in (
        "cli",
        "dataset",
        "fetch",
        "hf_dataset",
        "prepare",
        "quality",
        "reader",
        "shard_index",
        "shards",
        "snapshot",
        "sources",
        "stdlib_corpus",
        "stream",
        "sync",
        "token_shards",
        "training",
    )
}
# the tools became plugins: xirang ckpt and xirang drill (xirang_ckpt), xirang bench (xirang_comm)
MOVED.update(
    {
        "xirang_core.checkpoint.cli": "xirang_ckpt.cli",
        "xirang_core.commands.devices": "xirang_inventory.command",
        "xirang_core.checkpoint.export": "xirang_ckpt.export",
        "xirang_core.checkpoint.interop": "xirang_ckpt.interop",
        "xirang_core.faults.drill": "xirang_ckpt.drill",
        "xirang_core.faults.inject": "xirang_ckpt.inject",
        "xirang_core.comm.bench": "xirang_comm.bench",
        "xirang_core.comm.bench_report": "xirang_comm.bench_report",
        "xirang_core.comm.scaling": "xirang_comm.scaling",
    }
)

# what a pretrained folder says (shape, tokenizer, weights) is read below the training loop,
# beside the checkpoints, so config and data can ask it without importing train/
MOVED["xirang_core.tracking.session"] = "xirang.tracking.session"
MOVED["xirang_core.train.pretrained"] = "xirang_core.checkpoint.pretrained"
# modules named for what they hold: two peaks (memory, FLOP/s), the wrappers' measured costs,
# the runtime's memory
MOVED |= {
    "xirang_core.parallel.peak": "xirang.planning.memory_peak",
    "xirang_core.train.peak": "xirang_core.train.flops_peak",
    "xirang_core.parallel.wrappers": "xirang_planner.wrapper_costs",
    "xirang_core.parallel.runtime": "xirang_planner.runtime_memory",
}

# the device SDK (the accelerator base and the readers only device plugins use) left the kernel
MOVED |= {
    f"xirang_core.devices.{n}": f"xirang.devices.{n}"
    for n in (
        "accelerator",
        "calibration",
        "compat",
        "health",
        "linkmatrix",
        "pci",
        "reading",
        "replay",
        "tools",
        "visible",
    )
}

# helpers only plugins use left the kernel for the SDK: comm plugins' pieces, the storage
# helpers of tier and dataset plugins, the families' sampling and stage layers, balance settings
MOVED["xirang_core.comm"] = "xirang.comm"  # every comm piece: no kernel module uses one
MOVED |= {f"xirang_core.storage.{n}": f"xirang.storage.{n}" for n in _STORAGE}
MOVED |= {
    "xirang_core.train.sample": "xirang.model.sampling",
    "xirang_core.parallel.stages": "xirang.model.stages",
    "xirang_core.parallel.layers": "xirang.model.layers",
    # the memory model, the runtime's measured memory and the wrappers' costs: the planner's own
    "xirang_core.parallel.memory": "xirang_planner.memory",
    "xirang_core.parallel.runtime_memory": "xirang_planner.runtime_memory",
    "xirang_core.parallel.wrapper_costs": "xirang_planner.wrapper_costs",
    "xirang_core.parallel.together": "xirang_planner.together",
    # the smoke run that trains plans a few steps (with its memory meters) is the planning SDK's;
    # parallel.smoke=true reaches it through the hook xirang_measure_plans
    "xirang_core.parallel.smoke": "xirang.planning.smoke",
    "xirang_core.parallel.meter": "xirang.planning.meter",
    "xirang_core.parallel.memory_peak": "xirang.planning.memory_peak",
    "xirang_core.parallel.ondevice": "xirang.planning.ondevice",
    "xirang_core.devices.synchronize": "xirang.devices.synchronize",
    "xirang_core.train.balance_settings": "xirang.balance",
}


def new_name(fullname: str) -> str | None:
    """The module's name since the move, or None if it did not move."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old) :]
    return None


def renamed(module: str, names: dict[str, str], home: str | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` that hands out each renamed or moved name under its old name (a
    key of ``names``) for one release, warning (``DeprecationWarning``) that names the new one.

    The new names live in ``module`` itself (a class renamed in place) or, given ``home``, in
    that module, imported on first use (names that moved out, e.g. to the SDK, where the old
    module may not import the new one at load)."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where = home or module
        now = names[name] if home is None else f"{home}.{names[name]}"
        warnings.warn(
            f"{module}.{name} is now {now}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(where), names[name])

    return __getattr__


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds a moved module under its old name and hands out the new module."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None  # find_spec answered only for moved names
        warnings.warn(
            f"{spec.name} moved to {new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once: after it, the path finder would load a
    moved submodule's file a second time under its old name."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
