"""The pool service left the kernel (``xirang_core.pool|cost|console|web`` are now
``xirang_service.*``): a plugin written against the old names still loads, warned, and gets the
very same modules; the kernel itself imports neither the service nor a plugin."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("xirang_core.pool.policy", "xirang_service.pool.policy"),
        ("xirang_core.cost.money", "xirang_service.cost.money"),
        ("xirang_core.console", "xirang_service.console"),
        ("xirang_core.web.limits", "xirang_service.web.limits"),
        ("xirang_core.checkpoint.export", "xirang_ckpt.export"),
        ("xirang_core.faults.drill", "xirang_ckpt.drill"),
        ("xirang_core.comm.scaling", "xirang_comm.scaling"),
        ("xirang_core.devices.accelerator", "xirang.devices.accelerator"),
        ("xirang_core.devices.visible", "xirang.devices.visible"),
        ("xirang_core.train.pretrained", "xirang_core.checkpoint.pretrained"),
        ("xirang_core.parallel.wrappers", "xirang_planner.wrapper_costs"),
        ("xirang_core.parallel.memory", "xirang_planner.memory"),
        ("xirang_core.train.peak", "xirang_core.train.flops_peak"),
        ("xirang_core.comm.counting", "xirang.comm.counting"),
        ("xirang_core.storage.cache", "xirang.storage.cache"),
        ("xirang_core.train.sample", "xirang.model.sampling"),
        ("xirang_core.train.balance_settings", "xirang.balance"),
        ("xirang_core.tracking.session", "xirang.tracking.session"),
        ("xirang_core.parallel.smoke", "xirang.planning.smoke"),
        ("xirang_core.devices.calibration", "xirang.devices.calibration"),
    ],
)
def test_an_old_module_name_warns_and_is_the_new_module(old: str, new: str) -> None:
    code = (
        "import importlib, warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        f"    old = importlib.import_module({old!r})\n"
        f"new = importlib.import_module({new!r})\n"
        "assert old is new, (old, new)\n"
        "print([str(w.message) for w in seen if w.category is DeprecationWarning][-1])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{old} moved to {new}; the old name goes in the next release"


def test_a_class_imported_by_its_old_name_is_the_same_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("xirang_core.pool", "xirang_core.pool.policy"):  # imported afresh: it warns
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.warns(DeprecationWarning, match="xirang_service.pool.policy"):
        from xirang_core.pool.policy import Policy as Old
    from xirang_service.pool.policy import Policy

    assert Old is Policy


@pytest.mark.parametrize(
    ("module", "new"),
    [
        ("xirang.planning", "ClusterShape"),
        ("xirang_core.parallel.cluster", "ClusterShape"),
        ("xirang_service.pool", "Inventory"),
        ("xirang_service.pool.cluster", "Inventory"),
    ],
)
def test_a_renamed_cluster_class_still_imports_by_its_old_name_warned(
    module: str, new: str
) -> None:
    """The planner's machines (``ClusterShape``) and the pool's hardware (``Inventory``) were
    both ``Cluster``; code written against the old name gets the class, told its new name."""
    imported = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=f"{module}.Cluster is now {new}"):
        old = imported.Cluster
    assert old is getattr(imported, new)
    with pytest.raises(AttributeError, match="has no attribute 'Clusters'"):
        _ = imported.Clusters


def test_a_tracker_plugin_written_against_the_kernel_still_binds_its_hooks() -> None:
    """Tracker plugins once took ``run_event_hooks`` from ``xirang_core.tracking``; it is the
    SDK's (``xirang.tracking``) now, and the old place hands it out, warned."""
    import xirang_core.tracking as old
    from xirang.tracking import run_event_hooks

    with pytest.warns(
        DeprecationWarning,
        match="xirang_core.tracking.run_event_hooks is now xirang.tracking.events.run_event_hooks",
    ):
        assert old.run_event_hooks is run_event_hooks
    with pytest.raises(AttributeError):
        _ = old.no_such_name


def test_a_name_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        __import__("xirang_core.nothing_here")


def test_loading_the_kernel_imports_nothing_of_the_service() -> None:
    """What a training run's worker imports from the kernel pulls in no service module."""
    code = (
        "import sys\n"
        "import xirang_core.run, xirang_core.train.worker, xirang_core.train.loop\n"
        "print(sorted(m for m in sys.modules if m.startswith('xirang_service')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
