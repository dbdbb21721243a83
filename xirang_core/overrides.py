"""Every key and group a command line names is checked against the config it would change,
before Hydra composes: a typo gets one ``xirang error:`` line with "did you mean", instead of
Hydra's "Key ... is not in struct" (whose advice, ``+key``, would add a setting nothing reads).

Only the structure is checked here (does the key exist?); values and settings a ``+key`` adds
are checked by the schemas in :mod:`xirang_core.config` once the config is composed. A section
without a schema (``data``, a device or scheduler option that declares none) takes no new keys:
nothing would read them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from xirang_core.errors import ConfigError
from xirang_core.plugins import Registry

#: Hydra flags that choose another primary config: the default one says nothing about its keys
OTHER_PRIMARY = ("config_name", "config_path", "config_dir")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"Did you mean X? "`` (or ``"X or Y"``) for the choices close to ``word``; "" if none."""
    return _hint(_close(word, choices))


def _hint(names: list[str]) -> str:
    return f"Did you mean {' or '.join(names[:3])}? " if names else ""


def _close(word: str, choices: Iterable[str]) -> list[str]:
    return difflib.get_close_matches(word, sorted(set(choices)), n=3, cutoff=0.6)


#: whether a section's settings are checked by a schema once composed: (section, tree, registry)
HasSchema = Callable[[str, dict[str, Any], Registry], bool]


def check_keys(
    args: list[str],
    groups: dict[str, set[str]],
    registry: Registry,
    has_schema: HasSchema,
    register: Callable[[Registry], None],
) -> None:
    """Refuse an override whose key or group does not exist in the composed config. The config
    module hands in what it owns: ``has_schema`` (its schemas) and ``register`` (its Hydra
    set-up), so this module, which it imports, never imports it back."""
    overrides = [o for o in _parse(args) if not _is_internal(o)]
    keyed = [o for o in overrides if not _is_group(o.key_or_group, groups)]
    if not keyed:
        return  # nothing to look up: no second composition
    tree = _compose_tree([o for o in overrides if o not in keyed], registry, register)
    if tree is None:
        return  # the groups themselves do not compose: Hydra's own message says why
    for override in keyed:
        _check_key(override, tree, registry, has_schema)


#: sections xirang's own tools add to a run and users never type: ``xirang drill``'s injected
#: faults (``+drill={...}``, read by the plugin answering ``xirang_fault_injector``)
INTERNAL_SECTIONS = ("drill",)


def _is_internal(override: Any) -> bool:
    return override.is_add() and override.key_or_group.split(".")[0] in INTERNAL_SECTIONS


def _parse(args: list[str]) -> list[Any]:
    """The overrides among Hydra's command-line arguments, parsed by Hydra's own grammar."""
    from hydra._internal.utils import get_args_parser
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        parsed = get_args_parser().parse_args(args)
    except SystemExit:  # --version, or flags Hydra itself will refuse
        return []
    if any(getattr(parsed, flag) for flag in OTHER_PRIMARY):
        return []
    parser = OverridesParser.create()
    overrides = []
    for arg in parsed.overrides:
        try:
            overrides.extend(parser.parse_overrides([arg]))
        except OverrideParseException as exc:
            first = str(exc).strip().splitlines()[0]
            raise ConfigError(f"{arg}: not a valid override ({first})") from None
    return overrides


def _is_group(key: str, groups: dict[str, set[str]]) -> bool:
    return key in groups or "/" in key  # e.g. hydra/launcher=submitit_slurm


def _compose_tree(
    group_overrides: list[Any], registry: Registry, register: Callable[[Registry], None]
) -> dict[str, Any] | None:
    """The config's keys (Hydra's own included) with the command line's groups chosen."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from hydra.initialize import get_gh_backup, restore_gh_from_backup
    from omegaconf import OmegaConf

    register(registry)
    chosen = [f"{o.get_key_element()}={_first_value(o)}" for o in group_overrides]
    running = get_gh_backup()  # a Hydra app composing a smoke run keeps its own state
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="xirang_conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=chosen, return_hydra_config=True)
    except (HydraException, ValueError):
        return None
    finally:
        restore_gh_from_backup(running)
    return OmegaConf.to_container(cfg, resolve=False)  # type: ignore[return-value]


def _first_value(override: Any) -> str:
    """A group sweep's first option: every job of the sweep must know the keys given."""
    if override.is_sweep_override():
        return next(iter(override.sweep_string_iterator()))
    return override.value()


def _check_key(
    override: Any, tree: dict[str, Any], registry: Registry, has_schema: HasSchema
) -> None:
    """Walk the key's path; the first part that is missing is the error."""
    parts = override.key_or_group.split(".")
    node: Any = tree
    for depth, part in enumerate(parts):
        if not isinstance(node, dict):
            return  # inside a list or a value: Hydra's message is specific enough
        last = depth == len(parts) - 1
        if part in node:
            node = node[part]
            continue
        if last and depth > 0 and (override.is_add() or override.is_force_add()):
            if has_schema(parts[0], tree, registry):
                return  # a new setting of a known section: its schema accepts it or names keys
            raise ConfigError(_unread(override, parts[: depth + 1], node, tree))
        if parts[0] == "parallel" and part.startswith("balance"):
            option = (tree.get("parallel") or {}).get("name", "?")
            raise ConfigError(
                f"{override.get_key_element()}: parallel={option} cannot balance its workers; "
                f"parallel.balance works with parallel=ddp or parallel=fsdp (data parallel)"
            )
        raise ConfigError(_unknown(override, parts[: depth + 1], node, tree))
    if override.is_add():
        key = override.key_or_group
        raise ConfigError(f"+{key}: {key} is already set; override it with {key}=<value>")


def _unread(override: Any, path: list[str], siblings: dict[str, Any], tree: dict[str, Any]) -> str:
    """A new key in a section that has no schema: nothing reads it."""
    section, option = path[0], (tree.get(path[0]) or {}).get("name", "")
    chosen = f" (the option {section}={option} declares no settings schema)" if option else ""
    return (
        f"{override.get_key_element()}: {section} takes no setting '{path[-1]}'{chosen}, so "
        f"nothing would read it. {did_you_mean(path[-1], siblings)}"
        f"Valid keys of {'.'.join(path[:-1])}: {', '.join(sorted(siblings)) or 'none'}"
    )


def _unknown(override: Any, path: list[str], siblings: dict[str, Any], tree: dict[str, Any]) -> str:
    """What is missing, the nearest names, and every name that would be valid there."""
    user_key, bad = override.get_key_element(), ".".join(path)
    named = "" if override.key_or_group == bad else f" '{bad}'"
    if len(path) == 1:
        return (
            f"{user_key}: no such config group or section{named}. "
            f"{did_you_mean(path[0], siblings)}Valid: {', '.join(sorted(siblings))}"
        )
    parent = ".".join(path[:-1])
    near = [f"{parent}.{name}" for name in _close(path[-1], siblings)]
    near += [p for p in _paths(tree) if p.rsplit(".", 1)[-1] == path[-1] and p not in near]
    valid = ", ".join(sorted(siblings))
    return f"{user_key}: no such setting{named}. {_hint(near)}Valid keys of {parent}: {valid}"


def _paths(tree: dict[str, Any], prefix: str = "") -> list[str]:
    """Every key path of the user's config (Hydra's own ``hydra`` section left out)."""
    found = []
    for key, value in tree.items():
        if not prefix and key == "hydra":
            continue
        path = f"{prefix}{key}"
        found.append(path)
        if isinstance(value, dict):
            found.extend(_paths(value, f"{path}."))
    return found
