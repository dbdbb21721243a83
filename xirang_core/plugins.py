"""Plugin loading and the registry of named implementations.

Each entry point of the group ``xirang`` is loaded on its own, so one plugin that fails to import
or raises in a registration hook is reported with its name and error while the others still load
(pluggy's ``load_setuptools_entrypoints`` stops at the first failure). ``XIRANG_DISABLE_PLUGINS``
(comma separated entry-point names) blocks plugins; ``XIRANG_STRICT_PLUGINS=1`` turns every load
problem into an error, for CI. ``XIRANG_PLUGINS`` (comma separated ``module`` or
``name=module``) loads modules that are importable but not installed as plugins, as pytest's
``-p`` does: a plugin's own tests and worker processes see it without a ``pip install``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, overload

import pluggy

from xirang_core import hookspecs
from xirang_core.errors import ConfigError, PluginError
from xirang_core.specs import DEFAULTS, SPEC_KINDS, ImplSpec, with_defaults

if TYPE_CHECKING:  # the protocols each kind's implementations follow
    from xirang_core.data.interface import Dataset
    from xirang_core.parallel.planning import Planner
    from xirang_core.specs import (
        Command,
        CommBackend,
        CostPolicy,
        DatasetSpec,
        DeviceBackend,
        DeviceBackendSpec,
        LRSchedule,
        Model,
        ModelSpec,
        Optimizer,
        PoolPolicy,
        Scheduler,
        SchedulerSpec,
        StorageTier,
        StorageTierSpec,
        Strategy,
        StrategySpec,
        Tokenizer,
        Tracker,
    )

ENTRY_POINT_GROUP = "xirang"
#: the core's own config groups: Hydra's primary config module, not a search-path entry
CORE_CONFIG = "pkg://xirang_conf"

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
    "tracker": "xirang_trackers",
    "command": "xirang_commands",
    "optimizer": "xirang_optimizers",
    "schedule": "xirang_lr_schedules",
    "planner": "xirang_planners",
    "dataset": "xirang_datasets",
    "policy": "xirang_pool_policies",
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
    #: Hydra config folders its ``xirang_config_search_paths`` returned
    config_paths: list[str] = field(default_factory=list)
    #: the hooks it implements (``xirang_on_step_end`` ...)
    hooks: list[str] = field(default_factory=list)
    #: the entry point's own name, when another distribution's plugin already held it
    renamed_from: str = ""

    @property
    def owner(self) -> str:
        """How an error names it: the entry point and the distribution that installed it."""
        return f"plugin {self.name} (distribution {self.distribution or 'unknown'})"


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

    @overload
    def spec(self, kind: Literal["device"], name: str) -> DeviceBackendSpec: ...
    @overload
    def spec(self, kind: Literal["parallel"], name: str) -> StrategySpec: ...
    @overload
    def spec(self, kind: Literal["scheduler"], name: str) -> SchedulerSpec: ...
    @overload
    def spec(self, kind: Literal["model"], name: str) -> ModelSpec: ...
    @overload
    def spec(self, kind: Literal["storage"], name: str) -> StorageTierSpec: ...
    @overload
    def spec(self, kind: Literal["dataset"], name: str) -> DatasetSpec: ...
    @overload
    def spec(self, kind: str, name: str) -> ImplSpec: ...
    def spec(self, kind: str, name: str) -> Any:
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

    # What ``load`` returns per kind: the class (or, for commands and optimizers, the
    # callable) that the kind's protocol in :mod:`xirang_core.specs` describes.
    @overload
    def load(self, kind: Literal["device"], name: str) -> type[DeviceBackend]: ...
    @overload
    def load(self, kind: Literal["parallel"], name: str) -> type[Strategy]: ...
    @overload
    def load(self, kind: Literal["storage"], name: str) -> type[StorageTier]: ...
    @overload
    def load(self, kind: Literal["comm"], name: str) -> type[CommBackend]: ...
    @overload
    def load(self, kind: Literal["scheduler"], name: str) -> type[Scheduler]: ...
    @overload
    def load(self, kind: Literal["cost"], name: str) -> type[CostPolicy]: ...
    @overload
    def load(self, kind: Literal["model"], name: str) -> type[Model]: ...
    @overload
    def load(self, kind: Literal["tokenizer"], name: str) -> type[Tokenizer]: ...
    @overload
    def load(self, kind: Literal["tracker"], name: str) -> type[Tracker]: ...
    @overload
    def load(self, kind: Literal["command"], name: str) -> Command: ...
    @overload
    def load(self, kind: Literal["optimizer"], name: str) -> Optimizer: ...
    @overload
    def load(self, kind: Literal["schedule"], name: str) -> type[LRSchedule]: ...
    @overload
    def load(self, kind: Literal["planner"], name: str) -> type[Planner]: ...
    @overload
    def load(self, kind: Literal["dataset"], name: str) -> type[Dataset]: ...
    def load(self, kind: str, name: str) -> Any:
        """Import the implementation of ``name``, its kind's optional members defaulted
        (:func:`~xirang_core.specs.with_defaults`); says what to install when it cannot."""
        spec = self.spec(kind, name)
        missing = spec.missing()
        if missing:
            hint = f" Install with: {spec.install}" if spec.install else ""
            raise PluginError(
                f"{kind} '{name}' (plugin {self.owners[(kind, name)]}) needs "
                f"{', '.join(missing)}, which is not installed.{hint}"
            )
        try:
            return with_defaults(spec.load(), DEFAULTS.get(kind))
        except Exception as exc:  # a plugin's import error must name the plugin
            raise PluginError(
                f"{kind} '{name}' (plugin {self.owners[(kind, name)]}) failed to import "
                f"{spec.target}: {type(exc).__name__}: {exc}"
            ) from exc

    @overload
    def create(self, kind: Literal["device"], settings: dict) -> DeviceBackend: ...
    @overload
    def create(self, kind: Literal["parallel"], settings: dict) -> Strategy: ...
    @overload
    def create(self, kind: Literal["storage"], settings: dict) -> StorageTier: ...
    @overload
    def create(self, kind: Literal["comm"], settings: dict) -> CommBackend: ...
    @overload
    def create(self, kind: Literal["scheduler"], settings: dict) -> Scheduler: ...
    @overload
    def create(self, kind: Literal["cost"], settings: dict) -> CostPolicy: ...
    @overload
    def create(self, kind: Literal["tracker"], settings: dict) -> Tracker: ...
    @overload
    def create(self, kind: Literal["schedule"], settings: dict) -> LRSchedule: ...
    @overload
    def create(self, kind: Literal["policy"], settings: dict) -> PoolPolicy: ...
    def create(self, kind: str, settings: dict) -> Any:
        """An instance of the implementation a config group selects (``settings['name']``),
        constructed with the group's other settings as keyword arguments."""
        options = {k: v for k, v in settings.items() if k != "name"}
        built = self.load(kind, settings["name"])(**options)  # type: ignore[call-overload]
        return with_defaults(built, DEFAULTS.get(kind))  # a factory's result, too

    def config_search_paths(self) -> list[str]:
        return [path for record in self.loaded() for path in record.config_paths]

    def loaded(self) -> list[PluginRecord]:
        return [r for r in self.plugins.values() if r.status == "loaded"]

    def option_files(self) -> dict[tuple[str, str], list[tuple[PluginRecord, Path]]]:
        """Every config option file, by (group, option), with the plugin that ships it (the
        core's own ``conf/`` counts as the plugin ``core``)."""
        options: dict[tuple[str, str], list[tuple[PluginRecord, Path]]] = {}
        for record in self.loaded():
            paths = [CORE_CONFIG] if record.name == "core" else record.config_paths
            for folder in map(config_folder, paths):
                for option in sorted(folder.glob("*/*.yaml")):
                    key = (option.parent.name, option.stem)
                    options.setdefault(key, []).append((record, option))
        return options

    def check_option_clashes(self) -> None:
        """Two plugins shipping one ``group/option`` file: which one Hydra composes would
        depend on search-path order, so a run could train one plugin's model under the other's
        name. Refuse, naming both packages and the fix."""
        for (group, option), shipped in sorted(self.option_files().items()):
            records = list({record.name: record for record, _ in shipped}.values())
            if len(records) > 1:
                owners = " and by ".join(record.owner for record in records)
                blockable = " or ".join(r.name for r in records if r.name != "core")
                raise PluginError(
                    f"config option {group}={option} is shipped by {owners} "
                    f"({', '.join(str(path) for _, path in shipped)}). Rename one plugin's "
                    f"conf/{group}/{option}.yaml, or block one plugin with "
                    f"XIRANG_DISABLE_PLUGINS={blockable}."
                )

    def hydra_plugins(self) -> list[str]:
        """Every Hydra plugin class the plugins add (``module:Class``), for Hydra to register."""
        return [t for result in self.pm.hook.xirang_hydra_plugins() for t in result or []]


def config_folder(path: str) -> Path:
    """The folder a ``file://`` or ``pkg://`` search-path entry names."""
    from importlib.resources import files

    if path.startswith("pkg://"):
        return Path(str(files(path.removeprefix("pkg://"))))
    return Path(path.removeprefix("file://"))


def conf_folder(module_file: str) -> list[str]:
    """What a plugin's ``xirang_config_search_paths`` returns for a ``conf/`` folder beside its
    ``__init__.py``: an absolute ``file://`` path, valid in wheels and editable installs alike."""
    return [f"file://{Path(module_file).resolve().parent / 'conf'}"]


def disabled_provider(registry: Registry, group: str, option: str) -> str:
    """The disabled plugin whose config folder holds ``group/option`` ('' if none), found
    without importing it: the reason an option the docs or the defaults name is missing."""
    from importlib.util import find_spec

    for record in registry.plugins.values():
        if record.status != "disabled":
            continue
        spec = find_spec(record.module.split(":")[0].split(".")[0])
        for folder in (spec.submodule_search_locations or []) if spec else []:
            if (Path(folder) / "conf" / group / f"{option}.yaml").is_file():
                return record.name
    return ""


def strict_mode() -> bool:
    return os.environ.get("XIRANG_STRICT_PLUGINS", "").lower() in {"1", "true", "yes"}


def disabled_names() -> set[str]:
    raw = os.environ.get("XIRANG_DISABLE_PLUGINS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


@cache
def get_registry() -> Registry:
    """The process-wide registry, built once from the installed entry points and
    ``XIRANG_PLUGINS``."""
    return build_registry([*metadata.entry_points(group=ENTRY_POINT_GROUP), *extra_plugins()])


class PluginEntryPoint(Protocol):
    """What the loader reads of an entry point: an installed one
    (:class:`importlib.metadata.EntryPoint`) or one ``XIRANG_PLUGINS`` names."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def dist(self) -> Any: ...
    def load(self) -> Any: ...


@dataclass(frozen=True)
class _Origin:
    """Stands for the distribution of a plugin that ``XIRANG_PLUGINS`` names."""

    name: str = "XIRANG_PLUGINS"
    version: str = ""


@dataclass(frozen=True)
class LocalEntryPoint:
    """An entry point for an importable module that no distribution declares."""

    name: str
    value: str
    group: str = ENTRY_POINT_GROUP
    dist: _Origin = field(default_factory=_Origin)

    def load(self) -> object:
        import importlib

        return importlib.import_module(self.value)


def extra_plugins() -> list[LocalEntryPoint]:
    """The modules ``XIRANG_PLUGINS`` names, as entry points."""
    points = []
    for item in filter(None, (i.strip() for i in os.environ.get("XIRANG_PLUGINS", "").split(","))):
        name, _, module = item.rpartition("=")
        points.append(LocalEntryPoint(name=name or module.rsplit(".", 1)[-1], value=module))
    return points


def build_registry(entry_points: Iterable[PluginEntryPoint]) -> Registry:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    plugins: dict[str, PluginRecord] = {"core": _register_core(pm)}
    disabled = disabled_names()
    for ep in _unique(entry_points):
        taken = plugins.get(ep.name)
        record = _load_entry_point(pm, ep, disabled, _free_name(plugins, ep), taken)
        plugins[record.name] = record
    registry = Registry(pm=pm, plugins=plugins, specs={}, owners={}, conflicts={})
    for record in plugins.values():
        if record.status == "loaded":
            _collect_specs(registry, record)
    problems = [r for r in plugins.values() if r.status == "failed" or r.renamed_from]
    if strict_mode() and problems:
        lines = "; ".join(f"{r.name}: {r.error}" for r in problems)
        raise PluginError(f"plugins failed to load (XIRANG_STRICT_PLUGINS is set): {lines}")
    return registry


def _dist_name(ep: PluginEntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist else ""


def _unique(entry_points: Iterable[PluginEntryPoint]) -> list[PluginEntryPoint]:
    """Entry points by name, xirang's own first where two share a name, each listed once (one
    distribution found twice on ``sys.path`` lists its entry points twice)."""
    seen: dict[tuple[str, str, str], PluginEntryPoint] = {}
    for ep in entry_points:
        seen.setdefault((ep.name, ep.value, _dist_name(ep)), ep)
    return sorted(seen.values(), key=lambda e: (e.name, _dist_name(e) != "xirang", _dist_name(e)))


def _free_name(plugins: dict[str, PluginRecord], ep: PluginEntryPoint) -> str:
    """The entry point's name, or ``name@distribution`` when another distribution already
    took that name: both stay loaded (a third-party ``gpt`` must not knock out the built-in)."""
    return ep.name if ep.name not in plugins else f"{ep.name}@{_dist_name(ep) or ep.value}"


def _register_core(pm: pluggy.PluginManager) -> PluginRecord:
    """The core's own commands and config folder go through the same hooks as any plugin's."""
    from xirang_core import commands

    pm.register(commands, name="core")
    return PluginRecord(
        name="core",
        module=commands.__name__,
        distribution="xirang",
        version=_version("xirang"),
        hooks=_hooks_of(pm, "core"),
    )


def _hooks_of(pm: pluggy.PluginManager, name: str) -> list[str]:
    plugin = pm.get_plugin(name)
    return sorted(caller.name for caller in pm.get_hookcallers(plugin) or [])


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def _load_entry_point(
    pm: pluggy.PluginManager,
    ep: PluginEntryPoint,
    disabled: set[str],
    name: str,
    taken: PluginRecord | None = None,
) -> PluginRecord:
    """Load one entry point as plugin ``name``; ``taken`` is the plugin that already holds the
    entry point's own name (another distribution's), if any."""
    dist = getattr(ep, "dist", None)
    record = PluginRecord(
        name=name,
        module=ep.value,
        distribution=dist.name if dist else "",
        version=dist.version if dist else "",
    )
    if name in disabled:  # a renamed one is blocked by its new name
        record.status = "disabled"
        record.error = "blocked by XIRANG_DISABLE_PLUGINS"
        return record
    if taken is not None:
        record.renamed_from = ep.name
        record.error = (
            f"entry point name '{ep.name}' is also used by {taken.owner}; both are loaded, "
            f"this one as '{name}'. Rename the entry point in the project.entry-points.xirang "
            f"table of {record.distribution or ep.value}'s pyproject.toml."
        )
    try:
        pm.register(ep.load(), name=name)
        record.hooks = _hooks_of(pm, name)
        if strict_mode():
            pm.check_pending()
    except Exception as exc:  # isolate the plugin; it is reported, the rest load
        record.status = "failed"
        record.error = f"{type(exc).__name__}: {exc}"
    return record


def _collect_specs(registry: Registry, record: PluginRecord) -> None:
    plugin = registry.pm.get_plugin(record.name)
    hooks = {**REGISTRATION_HOOKS, "config": "xirang_config_search_paths"}
    for kind, hook_name in hooks.items():
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
        if kind == "config":
            record.config_paths = [str(path) for path in specs]
            continue
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
