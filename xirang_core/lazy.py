"""Names a module hands out on first use: a package whose import must stay light (no torch, no
OmegaConf) can still offer the heavy names in its ``__all__``; the module that holds each is
imported only when a caller asks for it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(module: str, homes: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving each name of ``homes`` from the module it maps to,
    imported on first use; any other name is the usual ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(importlib.import_module(homes[name]), name)

    return __getattr__
