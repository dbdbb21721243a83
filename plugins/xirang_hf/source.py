"""The ``transformers`` config a run's ``model`` section describes, read from local files only.

Every part of the plugin (settings check, model, layout for export) reads the config through
here, so the run's overrides (``max_seq_len``, ``vocab_size``) apply the same way everywhere."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from xirang import ConfigError

# belt and braces: every call below also passes local_files_only=True
os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIG_FILE = "config.json"


def config_path(settings: dict[str, Any]) -> Path:
    """The config.json named by ``model.config`` (a file or a directory), or by
    ``model.pretrained`` when ``model.config`` is empty."""
    given = settings.get("config") or settings.get("pretrained") or ""
    key = "model.config" if settings.get("config") else "model.pretrained"
    if not given:
        raise ConfigError(
            "model.config: required for model=hf: a local directory holding config.json, or the "
            "config.json itself (or set model.pretrained=<dir> to take the config from there)"
        )
    path = Path(given).expanduser()
    path = path / CONFIG_FILE if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(
            f"{key}={given}: no such file or directory with a {CONFIG_FILE} (nothing is "
            f"downloaded: give a local path)"
        )
    return path.resolve()


def load_config(settings: dict[str, Any]) -> Any:
    """The ``PretrainedConfig`` with the run's overrides applied (0 keeps the file's value)."""
    from transformers import AutoConfig

    path = config_path(settings)
    try:  # never the folder's own Python (auto_map), and never a prompt asking to run it
        config = AutoConfig.from_pretrained(
            str(path), local_files_only=True, trust_remote_code=False
        )
    except (ValueError, OSError, KeyError, TypeError) as exc:
        if _names_own_code(path):
            raise ConfigError(
                f"model.config={path}: its config.json names its own code (auto_map) for a "
                f"model type transformers does not have built in; xirang never runs code from "
                f"a model folder. Use a model type of the installed transformers"
            ) from None
        raise ConfigError(
            f"model.config={path}: transformers cannot read this config ({first_line(exc)})"
        ) from None
    if settings.get("vocab_size"):
        config.vocab_size = settings["vocab_size"]
    if settings.get("max_seq_len"):
        config.max_position_embeddings = settings["max_seq_len"]
    config.use_cache = False  # training: no key/value cache
    return config


def _names_own_code(path: Path) -> bool:
    """Whether the config.json at ``path`` maps classes to Python files of its folder."""
    try:
        return "auto_map" in json.loads(path.read_text())
    except (OSError, ValueError):
        return False


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
