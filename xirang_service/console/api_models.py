"""Answers of the console's JSON API (xirang_service/console/server.py), for its OpenAPI
document. The rows are the views' own (xirang_service/console/view.py), kept open here: the
pages and the API show the same dictionaries."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Row = dict[str, Any]


class OverviewOut(BaseModel):
    you: str
    taken: float
    capacity: dict[str, Any]
    drained_nodes: int
    quotas: list[Row]
    queued: int


class CostOut(BaseModel):
    by: dict[str, dict[str, Any]]
    budgets: list[Row]
    findings: list[Row]
