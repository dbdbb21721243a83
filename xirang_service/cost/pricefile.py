"""A price book file (YAML): what ``--prices`` of ``xirang pool serve`` and ``xirang console``
reads - the ``cost=pricebook`` keys, plus an optional ``placement:`` section for the pool."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from xirang_service.cost.errors import CostError
from xirang_service.cost.preferences import CostPreferences
from xirang_service.cost.pricebook import PriceBook

#: keys of a ``cost=`` option that a price book file may carry but the book does not use
_IGNORED = ("name", "capacity_class")


def read(path: str | Path) -> dict[str, Any]:
    """The file's mapping, checked to have ``prices``."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise CostError(f"--prices {path}: cannot read a price book: {exc}") from None
    if not isinstance(data, dict) or not data.get("prices"):
        raise CostError(f"--prices {path}: expected a mapping with 'prices: {{type: per hour}}'")
    return data


def load_pricebook(path: str | Path) -> PriceBook:
    """A price book from YAML (the same keys as the ``cost=pricebook`` option)."""
    return _book(path, read(path))


def load_preferences(path: str | Path) -> CostPreferences:
    """The pool's placement preferences: the book, and its ``placement:`` section."""
    data = read(path)
    placement = data.get("placement") or {}
    if not isinstance(placement, dict):
        raise CostError(f"--prices {path}: 'placement' must be a mapping")
    return CostPreferences.from_settings(_book(path, data), placement)


def _book(path: str | Path, data: dict[str, Any]) -> PriceBook:
    values = {k: v for k, v in data.items() if k not in (*_IGNORED, "placement")}
    try:
        return PriceBook.from_settings(values)
    except TypeError as exc:
        raise CostError(f"--prices {path}: {exc}") from None
