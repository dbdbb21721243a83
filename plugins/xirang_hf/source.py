"""The ``transformers`` config a run's ``model`` section describes, read from local files only.

Every part of the plugin (settings check, model, layout for export) reads the config through
here, so the run's overrides (``max_seq_len``, ``vocab_size``) apply the same way everywhere."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from xirang import ConfigError
from xirang.model import hf_config_file as config_path

# belt and braces: every call below also passes local_files_only=True
os.environ.setdefault("HF_HUB_OFFLINE", "1")


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
