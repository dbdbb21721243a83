"""The settings of ``data=chat`` (its registered schema): checked when a run's config is
composed, so this module imports neither torch nor the reader (:mod:`xirang_data.chat`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from xirang import ConfigError
from xirang.data import did_you_mean

#: ``data.val_fraction``'s default: the share held out when ``data.val`` names no file
VAL_FRACTION = 0.1


@dataclass
class ChatSettings:
    """Every ``data.*`` key of ``data=chat`` but the option's name; conf/data/chat.yaml
    documents them (the registered schema, checked when the config is composed).
    ``val``: a separate file of conversations, all held out (then none of ``path`` is)."""

    path: str = ""
    seq_len: int = 128
    val_fraction: float = VAL_FRACTION
    val: str = ""
    val_snapshot: str = ""
    shuffle: bool = True
    num_workers: int = 0
    snapshot: str = ""


@dataclass
class ChatConfig(ChatSettings):
    """The whole ``data`` section of ``data=chat``."""

    name: str = "chat"


def check(data: Mapping[str, Any]) -> ChatConfig:
    """``data`` as a :class:`ChatConfig`: unknown keys and bad values are one error."""
    known = {f.name for f in fields(ChatConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"data.{unknown[0]}: no such setting of data=chat. "
            f"{did_you_mean(unknown[0], known)}Valid: {', '.join(sorted(known))}"
        )
    cfg = ChatConfig(**data)
    if not cfg.path or cfg.path == "???":
        raise ConfigError('data=chat needs data.path=<file.jsonl>, one {"messages": [...]} a line')
    if not 0 < cfg.val_fraction < 1:
        raise ConfigError(
            f"data.val_fraction={cfg.val_fraction}: must be in (0, 1), the share of "
            "conversations held out for the evaluation loss"
        )
    if cfg.val and cfg.val_fraction != VAL_FRACTION:
        raise ConfigError(
            f"data.val={cfg.val} and data.val_fraction={cfg.val_fraction} name two held-out "
            "sets; set only one (data.val: a .jsonl file of conversations held out whole)"
        )
    return cfg
