"""Plugin loading and the registry of named implementations.

Each entry point of the group ``xirang`` is loaded on its own, so one plugin that fails to import
or raises in a registration hook is reported with its name and error while the others still load
(pluggy's ``load_setuptools_entrypoints`` stops at the first failure). ``XIRANG_DISABLE_PLUGINS``
(comma separated entry-point names) blocks plugins; ``XIRANG_STRICT_PLUGINS=1`` turns every load
problem into an error, for CI.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path

import pluggy

from xirang_core import hookspecs
from xirang_core.errors import ConfigError, PluginError
from xirang_core.specs import SPEC_KINDS, ImplSpec

ENTRY_POINT_GROUP = "xirang"

#: registration hook per spec kind
REGISTRATION_HOOKS: dict[str, str] = {
    "device": "xirang_device_backends",
    "parallel": "xirang_parallel_strategies",
    "storage": "xirang_storage_tiers",
    "comm": "xirang_comm_backends",
    "scheduler": "xirang_schedulers",
    "cost": "xirang_cost_policies",
    "model": "xirang_models",
    "tokenizer": "xirang_tokenizers",
    "command": "xirang_commands",
}
assert set(REGISTRATION_HOOKS) == {k.kind for k in SPEC_KINDS}


@dataclass
class PluginRecord:
    """What ``xirang plugins`` shows about one entry point."""

    name: str
    module: str
    distribution: str = ""
    version: str = ""
    status: str = "loaded"  # loaded | failed | disabled
    error: str = ""
    registers: list[ImplSpec] = field(default_factory=list)


@dataclass
class Registry:
    """Loaded plugins and every implementation they register, by kind and name."""

    pm: pluggy.PluginManager
    plugins: dict[str, PluginRecord]
    specs: dict[str, dict[str, ImplSpec]]
    owners: dict[tuple[str, str], str]
    conflicts: dict[tuple[str, str], list[str]]

    @property
    def hook(self) -> pluggy.HookRelay:
        return self.pm.hook

    def names(self, kind: str) -> list[str]:
        return sorted(self.specs.get(kind, {}))

    def spec(self, kind: str, name: str) -> ImplSpec:
        """The spec registered as ``name``; a clear error naming the valid choices otherwise."""
        if (kind, name) in self.conflicts:
            owners = " and ".join(self.conflicts[(kind, name)])
            raise PluginError(
                f"{kind} '{name}' is registered by two plugins: {owners}. Uninstall or disable one "
                f"(XIRANG_DISABLE_PLUGINS=<entry point name>)."
            )
        try:
            return self.specs[kind][name]
        except KeyError:
            valid = ", ".join(self.names(kind)) or "none installed"
            raise ConfigError(f"unknown {kind} '{name}'. Valid {kind} names: {valid}.") from None

    def load(self, kind: str, name: str) -> object:
        """Import the implementation of ``name``; says what to install when it cannot."""
        spec = self.spec(kind, name)
        missing = spec.missing()
        if missing:
            hint = f" Install with: {spec.install}" if spec.install else ""
            raise PluginError(
                f"{kind} '{name}' (plugin {self.owners[(kind, name)]}) needs "
                f"{', '.join(missing)}, which is not installed.{hint}"
            )
        try:
            return spec.load()
        except Exception as exc:  # a plugin's import error must name the plugin
            raise PluginError(
                f"{kind} '{name}' (plugin {self.owners[(kind, name)]}) failed to import "
                f"{spec.target}: {type(exc).__name__}: {exc}"
            ) from exc

    def create(self, kind: str, settings: dict) -> object:
        """An instance of the implementation a config group selects (``settings['name']``),
        constructed with the group's other settings as keyword arguments."""
        options = {k: v for k, v in settings.items() if k != "name"}
        return self.load(kind, settings["name"])(**options)

    def config_search_paths(self) -> list[str]:
        paths: list[str] = []
        for result in self.pm.hook.xirang_config_search_paths():
            paths.extend(result or [])
        return paths

    def hydra_plugins(self) -> list[str]:
        """Every Hydra plugin class the plugins add (``module:Class``), for Hydra to register."""
        return [t for result in self.pm.hook.xirang_hydra_plugins() for t in result or []]


def conf_folder(module_file: str) -> list[str]:
    """What a plugin's ``xirang_config_search_paths`` returns for a ``conf/`` folder beside its
    ``__init__.py``: an absolute ``file://`` path, valid in wheels and editable installs alike."""
    return [f"file://{Path(module_file).resolve().parent / 'conf'}"]


def strict_mode() -> bool:
    return os.environ.get("XIRANG_STRICT_PLUGINS", "").lower() in {"1", "true", "yes"}


def disabled_names() -> set[str]:
    raw = os.environ.get("XIRANG_DISABLE_PLUGINS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


@cache
def get_registry() -> Registry:
    """The process-wide registry, built once from the installed entry points."""
    return build_registry(metadata.entry_points(group=ENTRY_POINT_GROUP))


def build_registry(entry_points: Iterable[metadata.EntryPoint]) -> Registry:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    plugins: dict[str, PluginRecord] = {"core": _register_core(pm)}
    disabled = disabled_names()
    for ep in sorted(entry_points, key=lambda e: e.name):
        plugins[ep.name] = _load_entry_point(pm, ep, disabled)
    registry = Registry(pm=pm, plugins=plugins, specs={}, owners={}, conflicts={})
    for record in plugins.values():
        if record.status == "loaded":
            _collect_specs(registry, record)
    problems = [r for r in plugins.values() if r.status == "failed"]
    if strict_mode() and problems:
        lines = "; ".join(f"{r.name}: {r.error}" for r in problems)
        raise PluginError(f"plugins failed to load (XIRANG_STRICT_PLUGINS is set): {lines}")
    return registry


def _register_core(pm: pluggy.PluginManager) -> PluginRecord:
    """The core's own commands go through the same hooks as any plugin's."""
    from xirang_core import commands

    pm.register(commands, name="core")
    return PluginRecord(
        name="core", module=commands.__name__, distribution="xirang", version=_version("xirang")
    )


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def _load_entry_point(
    pm: pluggy.PluginManager, ep: metadata.EntryPoint, disabled: set[str]
) -> PluginRecord:
    dist = getattr(ep, "dist", None)
    record = PluginRecord(
        name=ep.name,
        module=ep.value,
        distribution=dist.name if dist else "",
        version=dist.version if dist else "",
    )
    if ep.name in disabled:
        record.status = "disabled"
        record.error = "blocked by XIRANG_DISABLE_PLUGINS"
        return record
    try:
        pm.register(ep.load(), name=ep.name)
        if strict_mode():
            pm.check_pending()
    except Exception as exc:  # isolate the plugin; it is reported, the rest load
        record.status = "failed"
        record.error = f"{type(exc).__name__}: {exc}"
    return record


def _collect_specs(registry: Registry, record: PluginRecord) -> None:
    plugin = registry.pm.get_plugin(record.name)
    for kind, hook_name in REGISTRATION_HOOKS.items():
        impl = getattr(plugin, hook_name, None)
        if impl is None:
            continue
        try:
            specs = list(impl() or [])
        except Exception as exc:
            record.status = "failed"
            record.error = f"{hook_name} raised {type(exc).__name__}: {exc}"
            registry.pm.unregister(name=record.name)
            _forget(registry, record)
            return
        for spec in specs:
            _add_spec(registry, record, kind, spec)


def _add_spec(registry: Registry, record: PluginRecord, kind: str, spec: ImplSpec) -> None:
    if spec.kind != kind:
        record.error = f"{spec.name!r} is a {spec.kind} spec returned from a {kind} hook; ignored"
        return
    key = (kind, spec.name)
    if key in registry.owners:
        first = registry.owners[key]
        registry.conflicts[key] = [first, record.name]
        record.error = f"{kind} '{spec.name}' is also registered by plugin {first}"
        if strict_mode():
            raise PluginError(
                f"{kind} '{spec.name}' is registered by two plugins: {first} and {record.name}"
            )
    else:
        registry.specs.setdefault(kind, {})[spec.name] = spec
        registry.owners[key] = record.name
    record.registers.append(spec)


def _forget(registry: Registry, record: PluginRecord) -> None:
    for spec in record.registers:
        registry.specs.get(spec.kind, {}).pop(spec.name, None)
        registry.owners.pop((spec.kind, spec.name), None)
    record.registers.clear()
