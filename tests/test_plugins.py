"""The plugin registry: isolation of broken plugins, conflicts, blocking, strict mode."""

from __future__ import annotations

import sys
import types
from importlib import metadata

import pytest

from xirang import hookimpl
from xirang.specs import CostPolicySpec, DeviceBackendSpec
from xirang_core.errors import ConfigError, PluginError
from xirang_core.plugins import build_registry, get_registry


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch):
    """Install in-memory plugin modules and return entry points that point at them."""

    def install(**modules: types.ModuleType | None) -> list[metadata.EntryPoint]:
        points = []
        for name, module in modules.items():
            module_name = f"fake_xirang_{name}"
            if module is not None:
                monkeypatch.setitem(sys.modules, module_name, module)
            points.append(metadata.EntryPoint(name=name, value=module_name, group="xirang"))
        return points

    return install


def plugin_module(name: str, **hooks) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook_name, fn in hooks.items():
        setattr(module, hook_name, hookimpl(fn))
    return module


def pricing(policy: str):
    return lambda: [CostPolicySpec(name=policy, target="fake:Policy")]


def test_a_plugin_that_fails_to_import_is_reported_and_the_rest_load(fake_plugins):
    good = plugin_module("good", xirang_cost_policies=pricing("cheap"))
    registry = build_registry(fake_plugins(good=good, missing=None))
    assert registry.names("cost") == ["cheap"]
    assert registry.plugins["missing"].status == "failed"
    assert "fake_xirang_missing" in registry.plugins["missing"].error


def test_a_plugin_whose_hook_raises_is_reported_and_the_rest_load(fake_plugins):
    def explode():
        raise RuntimeError("boom")

    bad = plugin_module("bad", xirang_cost_policies=explode)
    good = plugin_module("good", xirang_cost_policies=pricing("cheap"))
    registry = build_registry(fake_plugins(bad=bad, good=good))
    assert registry.names("cost") == ["cheap"]
    assert "boom" in registry.plugins["bad"].error


def test_two_plugins_registering_one_name_is_an_error_naming_both(fake_plugins):
    one = plugin_module("one", xirang_cost_policies=pricing("cheap"))
    two = plugin_module("two", xirang_cost_policies=pricing("cheap"))
    registry = build_registry(fake_plugins(one=one, two=two))
    with pytest.raises(PluginError, match="one and two"):
        registry.spec("cost", "cheap")


def test_strict_mode_turns_load_errors_into_failures(fake_plugins, monkeypatch):
    monkeypatch.setenv("XIRANG_STRICT_PLUGINS", "1")
    with pytest.raises(PluginError, match="missing"):
        build_registry(fake_plugins(missing=None))


def test_blocked_plugins_are_not_loaded(fake_plugins, monkeypatch):
    monkeypatch.setenv("XIRANG_DISABLE_PLUGINS", "good")
    good = plugin_module("good", xirang_cost_policies=pricing("cheap"))
    registry = build_registry(fake_plugins(good=good))
    assert registry.plugins["good"].status == "disabled"
    assert registry.names("cost") == []


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match=r"Valid parallel names: .*ddp.*single"):
        get_registry().spec("parallel", "nope")


def test_missing_dependency_marks_unavailable_with_install_hint(fake_plugins):
    spec = DeviceBackendSpec(
        name="fancy", target="fake:Fancy", requires=("no_such_vendor_lib",), install="pip install x"
    )
    vendor = plugin_module("vendor", xirang_device_backends=lambda: [spec])
    registry = build_registry(fake_plugins(vendor=vendor))
    assert registry.names("device") == ["fancy"]  # listed although it cannot run
    with pytest.raises(PluginError, match=r"no_such_vendor_lib.*pip install x"):
        registry.load("device", "fancy")


def test_builtin_plugins_register_through_entry_points():
    registry = get_registry()
    assert {"cpu", "torch", "local", "localfs", "flatprice", "gpt"} <= set(registry.plugins)
    assert registry.owners[("device", "cpu")] == "cpu"
    assert "single" in registry.names("parallel") and "ddp" in registry.names("parallel")
