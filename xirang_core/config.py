"""Hydra wiring and validation of the composed config.

Plugins add config groups through the ``xirang_config_search_paths`` hook; the core feeds those
folders to Hydra through a search-path plugin it registers itself, because Hydra's own
``hydra_plugins`` namespace discovery breaks under editable installs. Every composed config is
validated here, before anything starts, into one clear :class:`ConfigError`.
"""

from __future__ import annotations

import functools
import importlib
import re
import secrets
import sys
import textwrap
import types
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, ClassVar, cast

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from xirang_core.checkpoint.config import check_checkpoint
from xirang_core.checkpoint.pretrained import check_pretrained, folder_tokenizer, names_tokenizer
from xirang_core.contract import CORE_SCHEMAS, RunConfig, thaw
from xirang_core.data import document_mask
from xirang_core.data.tokenizer import settle_vocab
from xirang_core.errors import ConfigError
from xirang_core.overrides import check_keys, did_you_mean
from xirang_core.parallel.plan import degrees_on
from xirang_core.parallel.planning import check_auto
from xirang_core.plugins import Registry, disabled_provider
from xirang_core.specs.kinds import AUTO
from xirang_core.specs.records import Runtime
from xirang_core.sweep.objective import check_sweep
from xirang_core.tracking.config import check_trackers

#: config groups whose option is a registry name, and the registry kind it names
PLUGIN_GROUPS: dict[str, str] = {
    "device": "device",
    "parallel": "parallel",
    "comm": "comm",
    "storage": "storage",
    "scheduler": "scheduler",
    "cost": "cost",
    "tokenizer": "tokenizer",
    "schedule": "schedule",
    "data": "dataset",
}
#: groups that accept ``auto`` (parallel=auto: the planner picks the plan before launch)
AUTO_GROUPS = ("device", "comm", "parallel")

_RUN_UID = secrets.token_hex(3)

#: ``trainer.precision`` values and the torch dtype each computes in
PRECISIONS = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
#: ``trainer.nonfinite``: what a non-finite loss or gradient norm does to the run
NONFINITE = ("stop", "skip")


def register_with_hydra(registry: Registry) -> None:
    """Put every plugin's config folders on Hydra's search path and add xirang's resolvers."""
    from hydra.core.plugins import Plugins

    registry.check_option_clashes()
    search_path = _search_path_plugin()
    search_path.paths = registry.config_search_paths()  # this registry's folders, and no other's
    Plugins.instance().register(search_path)
    for target in registry.hydra_plugins():
        _register_hydra_plugin(target)
    if not OmegaConf.has_resolver("xirang_uid"):
        OmegaConf.register_new_resolver("xirang_uid", lambda: _RUN_UID)
    if not OmegaConf.has_resolver("xirang_config_groups"):
        OmegaConf.register_new_resolver("xirang_config_groups", _config_groups)


def _config_groups(width: int = 80) -> str:
    """``--help``'s config groups and their options, wrapped to ``width`` columns (Hydra's own
    ``$APP_CONFIG_GROUPS`` puts each group on one line, 99 wide for the model zoo)."""

    from hydra.core.global_hydra import GlobalHydra

    hydra = GlobalHydra.instance().hydra
    assert hydra is not None  # help is being printed: Hydra is initialised
    listing = hydra.format_config_groups(lambda g: not (g == "hydra" or g.startswith("hydra/")))
    lines = []
    for line in listing.splitlines():
        indent = " " * (line.index(":") + 2)
        lines.append(textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False))
    return "\n".join(lines) + "\n"


@functools.cache
def _search_path_plugin() -> Any:
    """The one search-path plugin class: Hydra keeps every class ever registered, so a class
    per call would leave an earlier registry's config folders on the path of later ones (two
    registries composed in one process, as the plugin test kit does, saw each other's)."""
    from hydra.core.config_search_path import ConfigSearchPath
    from hydra.plugins.search_path_plugin import SearchPathPlugin

    class XirangSearchPath(SearchPathPlugin):
        paths: ClassVar[list[str]] = []

        def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
            for path in self.paths:
                search_path.append(provider="xirang-plugin", path=path)

    return XirangSearchPath


def _register_hydra_plugin(target: str) -> None:
    """Register a plugin's Hydra plugin class (``module:Class``). Hydra finds plugin classes in
    its ``hydra_plugins`` namespace (the class sets ``__module__`` there) and imports the
    config's ``_target_`` by that name, so the module is also importable under it."""
    from hydra.core.plugins import Plugins

    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    plugin = getattr(module, name)
    parent, _, leaf = plugin.__module__.rpartition(".")
    if parent:
        setattr(_namespace(parent), leaf, module)
    sys.modules.setdefault(plugin.__module__, module)
    Plugins.instance().register(plugin)


def _namespace(name: str) -> types.ModuleType:
    """The package ``name`` (Hydra's ``hydra_plugins``), made an empty namespace when nothing
    installed provides it: only another Hydra plugin's distribution does (hydra-core does not),
    and a sweep with only ``xirang[optuna]`` installed must still find its sweeper there."""
    try:
        return importlib.import_module(name)
    except ImportError:
        package = types.ModuleType(name)
        package.__path__ = []
        return sys.modules.setdefault(name, package)


def compose(
    overrides: list[str] | tuple[str, ...] = (), registry: Registry | None = None
) -> RunConfig:
    """The validated config ``python -m xirang OVERRIDES`` would run, as plain data, composed
    without Hydra's command line (benchmarks, the plan command, smoke runs, tests)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    from xirang_core.plugins import get_registry

    registry = registry or get_registry()
    check_overrides(list(overrides), registry)
    register_with_hydra(registry)
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="xirang_conf", version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    return validate(cfg, registry, list(overrides))


def group_options(registry: Registry) -> dict[str, set[str]]:
    """Every config group and its options, from the core's folder and each plugin's."""
    options: dict[str, set[str]] = {}
    for group, option in registry.option_files():
        options.setdefault(group, set()).add(option)
    return options


def check_overrides(args: list[str], registry: Registry) -> None:
    """Reject ``group=option`` overrides naming an option that does not exist, and keys or
    groups that do not exist, naming the close ones and the valid ones, before Hydra prints its
    search path (or "not in struct") at the user."""
    check_options(args, registry)
    check_keys_of(args, registry)


def check_options(args: list[str], registry: Registry) -> None:
    """Reject a ``group=option`` naming no option of the group (and a default option whose
    plugin is disabled): no composition needed."""
    options = group_options(registry)
    for arg in args:
        match = re.fullmatch(r"([A-Za-z_][\w]*)=\[?([\w.,-]+)\]?", arg)
        if not match or match.group(1) not in options:
            continue
        group, values = match.groups()
        for value in values.split(","):  # a sweep (a,b) or a list of options ([a,b])
            if value not in options[group]:
                raise ConfigError(_no_option(group, value, options[group], registry))
    chosen = {arg.split("=", 1)[0] for arg in args}
    for group, value in default_choices():  # a default whose plugin is disabled
        if group in options and group not in chosen and value not in options[group]:
            raise ConfigError(_no_option(group, value, options[group], registry, default=True))


def check_keys_of(args: list[str], registry: Registry) -> None:
    """Reject keys and groups that do not exist (this composes the config's groups)."""
    check_keys(args, group_options(registry), registry, has_schema, register_with_hydra)


def default_choices() -> list[tuple[str, str]]:
    """(group, option) of each entry in the core config's defaults list (a group that takes
    several options at once, as ``tracker: []``, gives one pair per option)."""
    from importlib.resources import files

    config = yaml.safe_load((files("xirang_conf") / "config.yaml").read_text())
    entries = [next(iter(e.items())) for e in config.get("defaults", []) if isinstance(e, dict)]
    return [
        (group, option)
        for group, chosen in entries
        for option in (chosen if isinstance(chosen, list) else [chosen])
    ]


def _no_option(
    group: str, value: str, valid: set[str], registry: Registry, default: bool = False
) -> str:
    """An option that does not exist here: the disabled plugin that has it, or the close ones."""
    listed = f"Valid {group} options: {', '.join(sorted(valid))}"
    owner = disabled_provider(registry, group, value)
    if owner:
        return (
            f"{group}={value}{' (the default)' if default else ''} comes from plugin "
            f"'{owner}', which XIRANG_DISABLE_PLUGINS blocks: enable it, or choose "
            f"another. {listed}"
        )
    return f"{group}={value}: no such option. {did_you_mean(value, valid)}{listed}"


def validate(cfg: DictConfig, registry: Registry, overrides: list[str] | None = None) -> RunConfig:
    """The composed config, checked and frozen (:class:`RunConfig`: what a later stage learns
    it derives a new config for, never writes into this one). ``overrides``: the command
    line's (None: Hydra's, when it composed ``cfg``)."""
    data = _to_container(cfg)
    for section, schema in CORE_SCHEMAS.items():
        data[section] = _check_schema(section, data.get(section) or {}, schema)
    # the core's own ranges first: refusing them needs no plugin module (and so no torch)
    check_checkpoint(data["checkpoint"])
    check_sweep(data["sweep"])
    _check_optim(data["optim"])
    _check_profile(data["trainer"])
    for group, kind in PLUGIN_GROUPS.items():
        data[group] = _check_plugin_group(group, kind, data.get(group), registry)
    data["tracker"] = check_trackers(data.get("tracker"), registry, _check_schema)
    _check_drill(data, registry)
    data["model"] = _check_model(data.get("model"), registry)
    command_line = _hydra_overrides() if overrides is None else overrides
    _take_folder_tokenizer(data, registry, command_line)
    _take_family_tokenizer(data, registry, command_line)
    settle_vocab(data, registry)  # model.vocab_size: 0 -> the tokenizer's; too small -> error
    given = model_overrides(command_line)
    if _check_pretrained(data["model"], registry, given):  # took the folder's shape
        settle_vocab(data, registry)  # the folder's vocabulary must hold the tokenizer's ids
    _check_batch(data)
    _check_choices(data["trainer"], data["optim"], registry)
    _check_strategy(data, registry)
    _check_family(data, registry)
    document_mask.check(data, registry)  # data.document_mask=true: a family and strategy that can
    return RunConfig(data)


#: the scalar entries every run's config holds beside its sections
SCALARS = ("project", "seed")


def check_written(data: Any, registry: Registry, source: str) -> RunConfig:
    """A config :func:`validate` returned and the launch derived from, read back where a
    worker starts (``source``: where it came from, the run's ``config.yaml``): each section
    there and its settings fitting their schema again, frozen. A config written by hand or
    by another version fails here in one error naming the section or key, not as a
    ``KeyError`` deep in a worker."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{source}: expected a run's config (a mapping of sections), got {data!r}"
        )
    try:
        _check_sections(thaw(data), registry)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return RunConfig(data)


def _check_sections(data: dict[str, Any], registry: Registry) -> None:
    sections = [*CORE_SCHEMAS, *PLUGIN_GROUPS, "model", "runtime"]
    for key in [*sections, *SCALARS]:
        if key not in data:
            raise ConfigError(
                f"no {key} section; a run's config holds {', '.join([*sections, *SCALARS])}, "
                f"as the launch (python -m xirang) writes it"
            )
    for section, schema in CORE_SCHEMAS.items():
        _check_schema(section, data[section], schema)
    for group, kind in [*PLUGIN_GROUPS.items(), ("model", "model")]:
        _check_written_group(group, kind, data[group], registry)
    check_trackers(data.get("tracker"), registry, _check_schema)
    facts = [f.name for f in fields(Runtime)]
    missing = [f for f in facts if f not in (data["runtime"] or {})]
    if missing:
        raise ConfigError(
            f"runtime.{missing[0]}: missing; the launch records the device it resolved in "
            f"runtime ({', '.join(facts)}) before a worker starts"
        )


def _check_written_group(group: str, kind: str, values: Any, registry: Registry) -> None:
    """A plugin section as validated: its option registered, its settings its schema's
    (without ``resolve``: what it derived was written with the rest)."""
    key = "family" if group == "model" else "name"
    if not isinstance(values, dict) or key not in values:
        raise ConfigError(f"{group}: expected a mapping with its {key}, got {values!r}")
    name = values[key]
    if name == AUTO and group in AUTO_GROUPS:
        return
    settings = {k: v for k, v in values.items() if k not in ("name", key)}
    _check_settings(group, kind, name, settings, registry)


def _to_container(cfg: DictConfig) -> dict[str, Any]:
    try:
        data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as exc:
        key = exc.full_key or "?"
        raise ConfigError(
            f"{key}: a value is required (it is '???'); set it with {key}=<value>"
        ) from None
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{exc.full_key or 'config'}: {exc.msg}") from None
    assert isinstance(data, dict)
    return cast("dict[str, Any]", data)  # a config's keys are strings


def _check_schema(section: str, values: Any, schema: type) -> dict[str, Any]:
    """Typed values for ``section``; names the key, the bad value and the accepted keys."""
    if not isinstance(values, dict):
        raise ConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    known = {f.name for f in fields(schema)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(
            f"{section}.{unknown[0]}: no such setting. {did_you_mean(unknown[0], known)}"
            f"Valid keys of {section}: {', '.join(sorted(known))}"
        )
    try:
        typed = OmegaConf.merge(_writable(OmegaConf.structured(schema)), values)
    except OmegaConfBaseException as exc:
        key = f"{section}.{exc.full_key}" if exc.full_key else section
        raise ConfigError(f"{key}: {_first_line(exc.msg or type(exc).__name__)}") from None
    return OmegaConf.to_container(typed)  # type: ignore[return-value]


def _writable(node: Any) -> Any:
    """``node`` with every part writable: OmegaConf makes a frozen dataclass's node (the core
    schemas') read-only, and the values given must merge into it."""
    OmegaConf.set_readonly(node, False)
    children = node.values() if isinstance(node, DictConfig) else node
    for child in children:
        if OmegaConf.is_config(child):
            _writable(child)
    return node


def _check_plugin_group(group: str, kind: str, values: Any, registry: Registry) -> dict[str, Any]:
    if not isinstance(values, dict) or "name" not in values:
        valid = ", ".join(
            [AUTO, *registry.names(kind)] if group in AUTO_GROUPS else registry.names(kind)
        )
        raise ConfigError(f"{group}: choose an option with {group}=<name>; valid: {valid}")
    name = values["name"]
    if name == AUTO and group == "parallel":  # the planner's name and the smoke run
        measures = bool(registry.hook.xirang_measure_plans.get_hookimpls())
        return check_auto(values, registry.names("planner"), _check_schema, measures)
    if name == AUTO and group in AUTO_GROUPS:
        return values
    settings = {k: v for k, v in values.items() if k != "name"}
    checked = _check_settings(group, kind, name, settings, registry)
    if checked is None:
        return values
    schema, settings = checked
    # as a model family's: what types cannot say (a range), through ``resolve(settings)``
    return {"name": name, **schema.resolve(settings)}


def _check_settings(
    group: str, kind: str, option: str, settings: dict[str, Any], registry: Registry
) -> tuple[Any, dict[str, Any]] | None:
    """``settings`` (a section's values but the option's own name) checked against the
    schema the option's plugin registered, with that schema; None when it registered none.
    The error names the option and its plugin too: the settings are that plugin's to define,
    and its docs (or ``xirang plugins``) say what they mean."""
    spec = registry.spec(kind, option)
    schema = spec.load_schema() if spec.schema else None
    if schema is None:
        return None
    try:
        return schema, _check_schema(group, settings, schema)
    except ConfigError as exc:
        chosen = f"{group}.family" if group == "model" else group
        owner = registry.owners.get((kind, option), "?")
        raise ConfigError(
            f"{exc} ({chosen}={option}: settings of plugin {owner}, schema {spec.schema})"
        ) from None


def _check_drill(data: dict[str, Any], registry: Registry) -> None:
    """A ``drill`` section (``xirang drill`` adds it) needs a plugin that injects its faults:
    refused here, before any worker starts, rather than a drill whose faults never fire."""
    if data.get("drill") and not registry.hook.xirang_fault_injector.get_hookimpls():
        raise ConfigError(
            "drill: no installed plugin injects faults (the built-in xirang_ckpt does); "
            "reinstall xirang or drop the drill section"
        )


def _check_model(values: Any, registry: Registry) -> dict[str, Any]:
    if not isinstance(values, dict) or "family" not in values:
        raise ConfigError("model: choose one with model=<option> (each option names a family)")
    family = values["family"]
    if registry.spec("model", family).missing():  # checking its settings may need it (hf)
        registry.load("model", family)  # raises the error naming what to install
    settings = {k: v for k, v in values.items() if k not in ("family", "name")}
    checked = _check_settings("model", "model", family, settings, registry)
    # a family may check what types cannot (a config file that must build) and fill derived
    # values, through a ``resolve(settings) -> settings`` on its schema
    if checked is not None:
        schema, settings = checked
        settings = schema.resolve(settings)
    return {"family": family, "name": values.get("name", family), **settings}


def _take_folder_tokenizer(data: dict[str, Any], registry: Registry, overrides: list[str]) -> None:
    """``model.pretrained=<dir>`` with a tokenizer.json: the run reads its data with that
    tokenizer unless the command line names one."""
    tokenizer = folder_tokenizer(data["model"], overrides)
    if tokenizer is not None:
        data["tokenizer"] = _check_plugin_group("tokenizer", "tokenizer", tokenizer, registry)


def _take_family_tokenizer(data: dict[str, Any], registry: Registry, overrides: list[str]) -> None:
    """A family written for one tokenizer (:attr:`ModelSpec.tokenizer`) reads its data with
    that tokenizer unless the command line names one."""
    wanted = registry.spec("model", data["model"]["family"]).tokenizer
    if not wanted or data["tokenizer"]["name"] == wanted:
        return
    if not any(names_tokenizer(o) for o in overrides):
        chosen = {"name": wanted}
        data["tokenizer"] = _check_plugin_group("tokenizer", "tokenizer", chosen, registry)


def _check_pretrained(model: dict[str, Any], registry: Registry, given: set[str]) -> bool:
    """``model.pretrained=<dir>``: the run takes the directory's shape (read from headers)
    except the settings in ``given`` (the command line's), which must match it; whether it
    changed any setting."""
    if not model.get("pretrained"):
        return False
    settings = {k: v for k, v in model.items() if k not in ("family", "name")}
    checked = check_pretrained(registry.spec("model", model["family"]), settings, given)
    changed = any(model.get(k) != v for k, v in checked.items())
    model.update(checked)
    return changed


def model_overrides(overrides: list[str]) -> set[str]:
    """The ``model.*`` settings a command line gives (``model.dim=64`` -> ``dim``)."""
    keys = (o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o)
    return {k.removeprefix("model.") for k in keys if k.startswith("model.")}


def _hydra_overrides() -> list[str]:
    """The overrides of the run Hydra is composing, or none outside one."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # no Hydra run: nothing was given on a command line
        return []


#: trainer settings that count something and must be at least 1
CHECKED_COUNTS = (
    "max_steps",
    "nproc",
    "global_batch",
    "log_every",
    "comm_timeout_s",
    "gc_every",
    "eval_batches",
)


def _check_batch(data: dict[str, Any]) -> None:
    trainer, parallel = data["trainer"], data["parallel"]
    for key in (*CHECKED_COUNTS, "nnodes"):
        if trainer.get(key, 1) < 1:
            raise ConfigError(f"trainer.{key}={trainer[key]}: must be at least 1")
    workers, named = run_workers(data)
    global_batch = trainer["global_batch"]
    if global_batch % workers:
        fits = [n for n in range(1, global_batch + 1) if global_batch % n == 0]
        raise ConfigError(
            f"trainer.global_batch={global_batch} does not divide over {named} ({workers} "
            f"workers). Use a worker count in {fits} or a global_batch that is a multiple of "
            f"{workers}."
        )
    # per data-parallel rank, as the planner and the scheduler count (a pipeline's stages share
    # their rank's sequences); degrees that do not fit the workers are the plan check's to name
    degrees = degrees_on(workers, parallel) if parallel.get("name") != AUTO else None
    ranks = degrees[0] if degrees else workers
    per_rank = global_batch // ranks
    micro = _micro_batch(trainer, per_rank, ranks) or global_batch // workers
    if micro < 1 or per_rank % micro:
        raise ConfigError(
            f"trainer.micro_batch={micro} does not divide the {per_rank} sequences each "
            f"data-parallel rank takes per step (global_batch / {ranks} ranks). Use a divisor "
            f"of {per_rank}, or 0."
        )
    trainer["micro_batch"], trainer["grad_accum"] = micro, per_rank // micro


def _micro_batch(trainer: dict[str, Any], per_rank: int, ranks: int) -> int:
    """The micro-batch ``trainer.grad_accum`` (gradient accumulation steps, the HF Trainer's
    ``gradient_accumulation_steps``) implies: each data-parallel rank's share of the global
    batch split into that many forward passes; else ``trainer.micro_batch`` (0: not set).
    The two name one thing, so both given must agree."""
    accum, micro = trainer["grad_accum"], trainer["micro_batch"]
    if accum == 0:
        return micro
    if accum < 0 or per_rank % accum:
        fits = [n for n in range(1, per_rank + 1) if per_rank % n == 0]
        raise ConfigError(
            f"trainer.grad_accum={accum} does not divide the {per_rank} sequences each "
            f"data-parallel rank takes per step (global_batch / {ranks} ranks). Use one of "
            f"{fits}, or 0 (as trainer.micro_batch implies)."
        )
    if micro and micro * accum != per_rank:
        raise ConfigError(
            f"trainer.grad_accum={accum} and trainer.micro_batch={micro} disagree: "
            f"{accum} micro-batches of {micro} are {accum * micro} sequences, but each "
            f"data-parallel rank takes {per_rank} per step (global_batch / {ranks} ranks). "
            f"Set only one of them (trainer.micro_batch={per_rank // accum} is "
            f"trainer.grad_accum={accum})."
        )
    return per_rank // accum


def run_workers(data: Mapping[str, Any]) -> tuple[int, str]:
    """All the run's workers (``trainer.nproc`` per node times the nodes: a multi-node
    scheduler's ``scheduler.nodes`` or torchrun's ``trainer.nnodes``) and the keys that make
    them, for messages."""
    trainer = data["trainer"]
    nproc, nnodes = trainer["nproc"], trainer.get("nnodes", 1)
    nodes = (data.get("scheduler") or {}).get("nodes", 1)
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"scheduler.nodes={nodes}: must be a whole number of nodes, at least 1")
    if nodes > 1:
        return nproc * nodes, f"scheduler.nodes={nodes} x trainer.nproc={nproc}"
    if nnodes > 1:
        return nproc * nnodes, f"trainer.nproc={nproc} x trainer.nnodes={nnodes}"
    return nproc, f"trainer.nproc={nproc}"


def check_nodes(trainer: dict[str, Any], scheduler: str) -> None:
    """``trainer.nnodes``/``node_rank``/``rdzv_endpoint`` (torchrun's): one job of the same
    command on N hosts, which meet at node 0's ``host:port`` (c10d rendezvous)."""
    nnodes, rank, endpoint = trainer["nnodes"], trainer["node_rank"], trainer["rdzv_endpoint"]
    check_node_scheduler(trainer, scheduler)
    if not 0 <= rank < nnodes:
        raise ConfigError(
            f"trainer.node_rank={rank}: must be in 0..{nnodes - 1} "
            f"(one rank per node of trainer.nnodes={nnodes}; node 0 hosts the rendezvous)"
        )
    if nnodes == 1 or scheduler != "local":
        return
    host, _, port = endpoint.rpartition(":")
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"trainer.rdzv_endpoint={endpoint!r}: trainer.nnodes={nnodes} needs node 0's "
            f"address as host:port (e.g. trainer.rdzv_endpoint=node0.example:29500), the same "
            f"on every node"
        )
    if trainer["max_restarts"]:
        raise ConfigError(
            f"trainer.max_restarts={trainer['max_restarts']}: restarts are one node's, and a "
            f"job of trainer.nnodes={nnodes} restarts on every node; use trainer.max_restarts=0 "
            f"and run the same command again on every node (it resumes from the checkpoint)"
        )


#: schedulers that start ``trainer.nnodes`` torchrun nodes (the others place nodes themselves)
TORCHRUN_SCHEDULERS = ("local", "kubernetes")


def check_node_scheduler(trainer: dict[str, Any], scheduler: str) -> None:
    """``trainer.nnodes`` is for schedulers that run torchrun's nodes; under Kubernetes the
    manifests give each pod its node rank and the rendezvous, so the command sets neither."""
    nnodes = trainer["nnodes"]
    if nnodes > 1 and scheduler not in TORCHRUN_SCHEDULERS:
        raise ConfigError(
            f"trainer.nnodes={nnodes}: the same command on each node is torchrun's form, for "
            f"scheduler={' or '.join(TORCHRUN_SCHEDULERS)}; scheduler={scheduler} places its "
            f"nodes itself (trainer.nnodes=1 there)"
        )
    if scheduler == "kubernetes" and (trainer["node_rank"] or trainer["rdzv_endpoint"]):
        raise ConfigError(
            "trainer.node_rank / trainer.rdzv_endpoint: scheduler=kubernetes sets them for "
            "each pod (its completion index; the first pod's DNS name); leave them unset"
        )


def _check_choices(trainer: dict[str, Any], optim: dict[str, Any], registry: Registry) -> None:
    """Settings that take one of a few names, and the evaluation interval."""
    choices = (
        ("trainer.precision", trainer["precision"], tuple(PRECISIONS)),
        ("trainer.nonfinite", trainer["nonfinite"], NONFINITE),
        ("optim.name", optim["name"], tuple(registry.names("optimizer"))),
    )
    for key, value, valid in choices:
        if value not in valid:
            raise ConfigError(f"{key}={value!r}: not one of the valid values {', '.join(valid)}")
    if trainer["eval_every"] < 0:
        raise ConfigError(
            f"trainer.eval_every={trainer['eval_every']}: must be 0 (evaluate at the end only) "
            f"or a step interval of at least 1"
        )


#: optim settings and the range each must lie in, as the optimizers would refuse them only
#: after the workers start (``betas`` in ``[0, 1)``, no negative rate)
OPTIM_RANGES = (
    ("lr", lambda v: v >= 0, ">= 0"),
    ("min_lr", lambda v: v >= 0, ">= 0"),
    ("weight_decay", lambda v: v >= 0, ">= 0"),
    ("beta1", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("beta2", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("warmup_steps", lambda v: v >= 0, ">= 0"),
)


def _check_optim(optim: dict[str, Any]) -> None:
    """Each optimizer setting in its range, refused before any worker starts."""
    for key, ok, valid in OPTIM_RANGES:
        if not ok(optim[key]):
            raise ConfigError(f"optim.{key}={optim[key]}: must be {valid}")


def _check_profile(trainer: dict[str, Any]) -> None:
    """``trainer.profile.steps``: a window ``[start, end]`` inside the steps the run trains."""
    steps, last = trainer["profile"]["steps"], trainer["max_steps"]
    if steps and (len(steps) != 2 or not 1 <= steps[0] <= steps[1] <= last):
        raise ConfigError(
            f"trainer.profile.steps={steps}: must be [start,end] with 1 <= start <= end <= "
            f"trainer.max_steps={last} (e.g. trainer.profile.steps=[{min(2, last)},{min(4, last)}]"
            f"), or [] for no profiling"
        )


def _check_family(data: dict[str, Any], registry: Registry) -> None:
    """What a model family's settings cannot say alone (the strategies its adapters run
    under): its schema's ``check_run`` of the whole config."""
    schema = registry.spec("model", data["model"]["family"]).load_schema()
    if schema is not None:
        schema.check_run(data)


def _check_strategy(data: dict[str, Any], registry: Registry) -> None:
    trainer, name, (nproc, named) = data["trainer"], data["parallel"]["name"], run_workers(data)
    check_nodes(trainer, data["scheduler"]["name"])
    if name == AUTO:
        return  # the planner picks a plan for nproc workers (xirang_core.parallel.resolve)
    spec = registry.spec("parallel", name)
    schema = spec.load_schema()
    if schema is not None:  # what the strategy's settings cannot say alone (model family, ...)
        schema.check(data)
    if nproc > 1 and not spec.multi_process:
        multi = [
            n for n in registry.names("parallel") if registry.spec("parallel", n).multi_process
        ]
        raise ConfigError(
            f"parallel={name} runs a single process but the run has {nproc} workers "
            f"({named}). Choose a multi-process strategy ({', '.join(multi)}) or one worker."
        )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def has_schema(section: str, tree: dict[str, Any], registry: Registry) -> bool:
    """Whether the section's settings are checked by a schema once composed (so a new key is
    either read or refused there); Hydra's own section is Hydra's to check."""
    values = tree.get(section) or {}
    if section == "hydra" or section in CORE_SCHEMAS:
        return True
    kind, name = (
        ("model", values.get("family"))
        if section == "model"
        else (PLUGIN_GROUPS.get(section), values.get("name"))
    )
    if kind is None or name not in registry.names(kind):
        return False
    return bool(registry.spec(kind, name).schema)
