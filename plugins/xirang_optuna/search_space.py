"""Hydra's sweep syntax as Optuna distributions: the search space of ``hydra/sweeper=optuna``.

The same command-line forms Hydra's own sweepers take, so a grid sweep becomes a search by
changing the sweeper only: ``interval(a, b)`` a float range (``tag(log, ...)`` on a log
scale, ``tag(int, ...)`` whole numbers), ``range(a, b[, step])`` the values Python's
``range`` gives, ``choice(...)`` or ``a,b,c`` one of the listed values; an override that
sweeps nothing is passed to every trial as it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from xirang import ConfigError


def search_space(overrides: Iterable[str]) -> tuple[dict[str, BaseDistribution], list[str]]:
    """The distributions to sample, by config key, and the overrides every trial gets."""
    space: dict[str, BaseDistribution] = {}
    fixed: list[str] = []
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if override.is_sweep_override():
            space[override.get_key_element()] = distribution(override)
        else:
            fixed.append(override.input_line or "")
    return space, fixed


def distribution(override: Override) -> BaseDistribution:
    """The Optuna distribution one sweep override stands for."""
    sweep, key = override.value(), override.get_key_element()
    if isinstance(sweep, IntervalSweep):
        return _interval(key, sweep)
    if isinstance(sweep, RangeSweep):
        return _range(key, sweep)
    if isinstance(sweep, ChoiceSweep) and sweep.list:
        return CategoricalDistribution([_plain(value) for value in sweep.list])
    raise ConfigError(
        f"{override.input_line}: not a search space Optuna can sample; use interval(a, b), "
        f"tag(log, interval(a, b)), range(a, b, step), choice(x, y, ...) or x,y,..."
    )


def _bounds(key: str, *values: float | None) -> list[float]:
    """The bounds of an interval or range; Hydra's parser fills each it reads, its types say
    only that they may be unset."""
    numbers = [value for value in values if value is not None]
    if len(numbers) != len(values):
        raise ConfigError(f"{key}: an interval or range needs a start and an end")
    return numbers


def _interval(key: str, sweep: IntervalSweep) -> BaseDistribution:
    low, high = (float(v) for v in _bounds(key, sweep.start, sweep.end))
    log = "log" in sweep.tags
    if low >= high or (log and low <= 0):
        raise ConfigError(
            f"{key}=interval({sweep.start}, {sweep.end}): needs start < end"
            + (", both above 0 on a log scale" if log else "")
        )
    if "int" in sweep.tags:
        return IntDistribution(int(low), int(high), log=log)
    return FloatDistribution(low, high, log=log)


def _range(key: str, sweep: RangeSweep) -> BaseDistribution:
    start, stop, step = _bounds(key, sweep.start, sweep.stop, sweep.step)
    count = math.ceil(round((stop - start) / step, 9)) if step else 0  # as Python's range
    if count < 1:
        raise ConfigError(f"{key}=range({start}, {stop}, {step}): gives no value to try")
    last = round(start + (count - 1) * step, 12)
    if all(isinstance(v, int) for v in (start, stop, step)):
        return IntDistribution(int(start), int(last), step=int(step))
    return FloatDistribution(float(start), float(last), step=float(step))


def _plain(value: Any) -> Any:
    """A choice as Optuna stores it: None, bool, int, float or str."""
    return value if value is None or isinstance(value, bool | int | float | str) else str(value)


def as_override(key: str, value: Any) -> str:
    """The command-line override that sets ``key`` to a sampled ``value``."""
    return f"{key}={'null' if value is None else value}"
