"""Findings: money spent on devices that did little.

Two kinds, each with what it cost:

* ``low_utilisation`` - a job held devices for long (``min_hours`` or more) at a mean
  utilisation under ``threshold``: the money for its idle share bought nothing;
* ``idle_after_end`` - an allocation kept ``min_idle_s`` or more after its run ended (the
  process exited but the devices were not released); the time held since is pure idle cost.
  The few seconds an executor needs to report an end are not a finding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from xirang_service.cost.charges import Charge
from xirang_service.cost.money import split_exact


@dataclass(frozen=True)
class Finding:
    kind: str
    ref: str
    project: str
    team: str
    device_type: str
    devices: int
    seconds: float
    cost_micro: int
    detail: str


def find(
    charges: Iterable[Charge],
    threshold: float = 0.3,
    min_hours: float = 1.0,
    min_idle_s: float = 300.0,
) -> list[Finding]:
    """Every finding in ``charges``, costliest first."""
    found: list[Finding] = []
    for charge in charges:
        found.extend(_low_utilisation(charge, threshold, min_hours))
        found.extend(_idle_after_end(charge, min_idle_s))
    return sorted(found, key=lambda f: (-f.cost_micro, f.ref))


def _low_utilisation(charge: Charge, threshold: float, min_hours: float) -> list[Finding]:
    util = charge.utilisation
    if util is None or util >= threshold or charge.held_s < min_hours * 3600:
        return []
    detail = f"{util:.0%} mean utilisation over {charge.held_s / 3600:.1f} h"
    return [_finding("low_utilisation", charge, charge.held_s, charge.idle_micro, detail)]


def _idle_after_end(charge: Charge, min_idle_s: float) -> list[Finding]:
    if charge.idle_after_s <= 0 or charge.idle_after_s < min_idle_s or charge.held_s <= 0:
        return []
    rest = charge.held_s - charge.idle_after_s
    weights = {"after": charge.idle_after_s, "before": rest}
    cost = split_exact(charge.amount_micro, weights)["after"] if charge.amount_micro else 0
    detail = f"held {charge.idle_after_s / 60:.0f} min after the run ended"
    return [_finding("idle_after_end", charge, charge.idle_after_s, cost, detail)]


def _finding(kind: str, charge: Charge, seconds: float, cost: int, detail: str) -> Finding:
    return Finding(
        kind,
        charge.ref,
        charge.project,
        charge.team,
        charge.device_type,
        charge.devices,
        seconds,
        cost,
        detail,
    )
