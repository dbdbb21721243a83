"""What a plugin author relies on (issue 18): clashes are named, a failing hook names its plugin,
keys nothing reads are refused, every kind has a checkable contract, and the listing shows what
a plugin adds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pluggy
import pytest

from xirang import hookimpl
from xirang_core import hookspecs
from xirang_core.config import check_overrides, compose
from xirang_core.errors import ConfigError, XirangError
from xirang_core.plugins import build_registry, get_registry

# What this file tests is new in issue 18, so names that did not exist before are imported in the
# tests that use them: on the code before, each test then fails on its own finding.


@dataclass(frozen=True)
class Dist:
    name: str
    version: str = "0.1.0"


@dataclass(frozen=True)
class InstalledEntryPoint:
    """An entry point as a third-party distribution declares it (name, module, distribution)."""

    name: str
    value: str
    dist: Dist = field(default_factory=lambda: Dist("xirang-third-party"))
    group: str = "xirang"

    def load(self) -> object:
        return sys.modules[self.value]


@pytest.fixture
def third_party(monkeypatch: pytest.MonkeyPatch):
    """The installed plugins plus an in-memory module declared by another distribution."""

    def install(name: str, dist: str, **hooks) -> list:
        module = types.ModuleType(f"fake_{dist.replace('-', '_')}")
        for hook_name, fn in hooks.items():
            setattr(module, hook_name, hookimpl(fn))
        monkeypatch.setitem(sys.modules, module.__name__, module)
        point = InstalledEntryPoint(name, module.__name__, Dist(dist))
        return [*metadata.entry_points(group="xirang"), point]

    return install


# --- clashes ---------------------------------------------------------------------------------


def test_two_plugins_shipping_one_config_option_is_an_error_naming_both(third_party, tmp_path):
    option = tmp_path / "conf" / "model" / "gpt_tiny.yaml"
    option.parent.mkdir(parents=True)
    option.write_text("family: gpt\nname: gpt_tiny\nn_layer: 1\n")
    folder = f"file://{tmp_path / 'conf'}"
    registry = build_registry(
        third_party("lstm", "xirang-lstm", xirang_config_search_paths=lambda: [folder])
    )
    with pytest.raises(XirangError) as error:
        compose(["trainer.max_steps=1"], registry)
    message = str(error.value)
    assert "config option model=gpt_tiny" in message
    assert "plugin gpt (distribution xirang)" in message
    assert "plugin lstm (distribution xirang-lstm)" in message
    assert "XIRANG_DISABLE_PLUGINS" in message


def test_an_entry_point_named_like_a_built_in_keeps_both_and_names_both(third_party):
    registry = build_registry(third_party("gpt", "xirang-evil", xirang_models=lambda: []))
    assert "gpt" in registry.names("model")  # the built-in family still loads
    assert registry.plugins["gpt"].distribution == "xirang"
    other = registry.plugins["gpt@xirang-evil"]
    assert other.status == "loaded"
    assert "also used by plugin gpt (distribution xirang)" in other.error
    assert "xirang-evil's pyproject.toml" in other.error


# --- a hook that raises ----------------------------------------------------------------------


def _manager(**plugins: types.ModuleType) -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    for name, module in plugins.items():
        pm.register(module, name=name)
    return pm


def _observer(fail: bool, is_optional: bool = False) -> types.ModuleType:
    from xirang import optional

    module = types.ModuleType("observer")

    def xirang_on_step_end(step):
        if fail:
            raise RuntimeError(f"exporter down at step {step}")

    marked = optional(xirang_on_step_end) if is_optional else xirang_on_step_end
    module.xirang_on_step_end = hookimpl(marked)
    return module


def test_a_failing_hook_is_one_error_naming_plugin_and_hook_with_the_traceback_logged(tmp_path):
    from xirang_core.hookcall import PluginHookError, notify

    pm = _manager(fine=_observer(False), exporter=_observer(True))
    ctx = types.SimpleNamespace(run_dir=str(tmp_path))
    with pytest.raises(PluginHookError) as error:
        notify(pm.hook, "xirang_on_step_end", ctx=ctx, step=5, metrics={})
    assert str(error.value).startswith(
        "plugin exporter: hook xirang_on_step_end raised RuntimeError: exporter down at step 5"
    )
    logged = (tmp_path / "plugin-errors.log").read_text()
    assert "Traceback" in logged and "exporter down at step 5" in logged


def test_an_optional_observer_that_fails_warns_and_the_others_still_run(tmp_path, caplog):
    from xirang_core.hookcall import notify

    seen = []
    recorder = types.ModuleType("recorder")
    recorder.xirang_on_step_end = hookimpl(lambda step: seen.append(step))
    pm = _manager(recorder=recorder, exporter=_observer(True, is_optional=True))
    notify(pm.hook, "xirang_on_step_end", ctx=None, step=3, metrics={})
    assert seen == [3]
    assert "plugin exporter: hook xirang_on_step_end raised RuntimeError" in caplog.text


BOOM = """
from xirang import hookimpl


@hookimpl
def xirang_on_step_end(step):
    if step >= 2:
        raise RuntimeError(f"exporter down at step {step}")
"""


def installed(site: Path, module: str, code: str, dist: str) -> dict[str, str]:
    """``module`` installed as pip would leave it (a ``.dist-info`` declaring its entry point)
    in ``site``; the environment that puts it on the path."""
    site.mkdir(parents=True)
    (site / f"{module}.py").write_text(code)
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(f"[xirang]\n{module} = {module}\n")
    return {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "200"}


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_run_whose_observer_raises_ends_with_one_line_naming_it(tmp_path, nproc):
    env = installed(tmp_path / "site", "xirang_boom", BOOM, "xirang-boom")
    quick = ["trainer.max_steps=4", "trainer.log_every=2", "trainer.global_batch=4"]
    quick += ["trainer.sample_tokens=0", "tokenizer=bytes", f"trainer.nproc={nproc}"]
    quick += ["parallel=ddp"] if nproc > 1 else []
    result = subprocess.run(
        [sys.executable, "-m", "xirang", *quick],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    errors = [line for line in output.splitlines() if "xirang error:" in line]
    assert len(errors) == 1, output[-3000:]
    assert (
        "plugin xirang_boom: hook xirang_on_step_end raised RuntimeError: exporter down at step 2"
        in errors[0]
    )
    assert "Traceback" not in output, output[-3000:]
    [log] = tmp_path.rglob("plugin-errors.log")
    assert "Traceback" in log.read_text() and "exporter down at step 2" in log.read_text()


# --- unknown keys ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("+schedule.bogus=1", "+schedule.bogus: schedule takes no setting 'bogus'"),
        ("+device.bogus=1", "(the option device=auto declares no settings schema)"),
        ("+comm.bogus=1", "+comm.bogus: comm takes no setting 'bogus'"),
    ],
)
def test_a_new_key_in_a_section_without_a_schema_is_refused(arg, message):
    with pytest.raises(ConfigError) as error:
        check_overrides([arg], get_registry())
    assert message in str(error.value)


# --- contracts -------------------------------------------------------------------------------


def test_every_built_in_entry_meets_the_protocol_of_its_kind():
    from xirang.testing import check_spec

    registry = get_registry()
    checked = [
        (kind, name)
        for kind, names in registry.specs.items()
        for name, spec in names.items()
        if not spec.missing()
    ]
    for kind, name in checked:
        check_spec(registry, kind, name)
    kinds = {kind for kind, _ in checked}
    assert {"device", "model", "tokenizer", "optimizer", "schedule", "command", "planner"} <= kinds


class Restarts:
    """Cosine from optim.lr to optim.min_lr, restarting every ``period`` steps."""

    def __init__(self, period: int = 2) -> None:
        self.period = period

    def lr(self, step, max_steps, optim):
        import math

        phase = (step - 1) % self.period / self.period
        return optim["min_lr"] + 0.5 * (optim["lr"] - optim["min_lr"]) * (
            1 + math.cos(math.pi * phase)
        )


@dataclass
class RestartsConfig:
    period: int = 2


def test_a_schedule_plugin_is_selected_by_the_schedule_group(third_party, tmp_path):
    from xirang.specs import LRScheduleSpec

    option = tmp_path / "conf" / "schedule" / "restarts.yaml"
    option.parent.mkdir(parents=True)
    option.write_text("name: restarts\nperiod: 3\n")
    spec = LRScheduleSpec(
        name="restarts", target=f"{__name__}:Restarts", schema=f"{__name__}:RestartsConfig"
    )
    registry = build_registry(
        third_party(
            "restarts",
            "xirang-restarts",
            xirang_lr_schedules=lambda: [spec],
            xirang_config_search_paths=lambda: [f"file://{tmp_path / 'conf'}"],
        )
    )
    config = compose(["schedule=restarts"], registry)
    assert config["schedule"] == {"name": "restarts", "period": 3}
    schedule = registry.create("schedule", config["schedule"])
    rates = [schedule.lr(s, 6, config["optim"]) for s in range(1, 7)]
    assert rates[0] == rates[3] == config["optim"]["lr"]  # a restart every 3 steps
    with pytest.raises(ConfigError, match=r"schedule\.period"):
        compose(["schedule=restarts", "schedule.period=soon"], registry)


# --- the listing -----------------------------------------------------------------------------


def _plugins(*args: str, columns: int = 200) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys; from xirang_core.cli import main; code = main(sys.argv[1:]); "
        "assert 'torch' not in sys.modules, 'xirang plugins imported torch'; sys.exit(code)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "plugins", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def test_the_listing_shows_options_and_hooks_of_every_plugin_without_importing_torch():
    result = _plugins("--json")
    assert result.returncode in (0, 1), result.stderr
    rows = {row["plugin"]: row for row in json.loads(result.stdout)}
    gpt = rows["gpt"]
    assert gpt["distribution"] == "xirang" and gpt["version"]
    assert "model/gpt_tiny" in gpt["options"]
    assert gpt["hooks"] == ["xirang_config_search_paths", "xirang_models"]
    assert "schedule/cosine" in rows["optim"]["options"]
    assert "xirang_on_run_end" in rows["pricebook"]["hooks"]  # an observer shows its hooks


def test_the_listing_fits_80_columns():
    result = _plugins(columns=80)
    assert "options" in result.stdout and "hooks:" in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_the_test_kit_is_a_registered_pytest_plugin():
    points = {ep.name: ep.value for ep in metadata.entry_points(group="pytest11")}
    assert points.get("xirang") == "xirang.testing"
