"""``parallel.balance*`` checked when a run's config is composed, apart from the balancer
(:mod:`xirang_core.train.balance`, which needs torch): a strategy's settings schema calls
:func:`check` without importing torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xirang_core.contract import RunConfig, thaw
from xirang_core.data.shares import proportional
from xirang_core.errors import ConfigError

MODES = ("uniform", "calibrated", "adaptive")
#: strategies whose gradient average tolerates unequal micro-batch counts per rank
STRATEGIES = ("ddp", "fsdp")


def check(data: dict[str, Any], world: int) -> None:
    """Compose-time check of ``parallel.balance*`` for a run of ``world`` data-parallel ranks
    (the strategy's schema calls it): one error naming what is valid."""
    parallel, trainer = data["parallel"], data["trainer"]
    mode, given = parallel.get("balance", "uniform"), list(parallel.get("balance_shares") or [])
    if mode not in MODES:
        raise ConfigError(f"parallel.balance={mode}: valid values are {', '.join(MODES)}")
    if mode == "uniform":
        if given:
            raise ConfigError(
                "parallel.balance_shares: fixed shares need parallel.balance=calibrated "
                "(kept) or adaptive (the start); parallel.balance is uniform"
            )
        return
    why = _cannot_balance(parallel)
    if why:
        raise ConfigError(
            f"parallel.balance={mode}: {why}; it works with parallel=ddp or parallel=fsdp "
            f"(data parallel only), or use parallel.balance=uniform"
        )
    total = trainer["global_batch"] // trainer["micro_batch"]  # compose: a whole number
    if given and (len(given) != world or min(given) < 1 or sum(given) != total):
        raise ConfigError(
            f"parallel.balance_shares={given}: give {world} whole numbers, each at least 1, "
            f"summing to global_batch / micro_batch = {total}"
        )
    if parallel.get("balance_every", 1) < 1:
        raise ConfigError("parallel.balance_every: must be at least 1 step")


def _cannot_balance(parallel: Mapping[str, Any]) -> str:
    """Why ``parallel`` cannot take unequal shares ("" when it can)."""
    split = [k for k in ("tp", "pp") if parallel.get(k, 1) not in (1,)] + (
        ["sp"] if parallel.get("sp") else []
    )
    if parallel["name"] in STRATEGIES and not split:
        return ""
    extra = f" with {', '.join(split)}" if split else ""
    return f"parallel={parallel['name']}{extra} cannot balance"


def balance_placement(config: Mapping[str, Any], speeds: list[float]) -> tuple[RunConfig, str]:
    """Balance a run placed on devices of unequal speed (a pool's mixed placement): ``speeds``
    is each data-parallel rank's relative speed (its devices' throughput for the job's class);
    the first shares follow them and ``adaptive`` moves them as measured, so the run trains
    balanced from its first step. Returns the config to write for the workers (``config``
    itself is left as it was) and what was set, or why nothing was: shares the user gave stay,
    as does a strategy that cannot balance. What an earlier placement set is undone first
    (``runtime.balance_placed`` keeps the user's mode), so each placement starts anew."""
    parallel, runtime = thaw(config["parallel"]), thaw(config.get("runtime") or {})
    if "balance_placed" in runtime:  # an earlier placement's shares, not the user's
        parallel["balance"] = runtime.pop("balance_placed")
        parallel.pop("balance_shares", None)
    placed, said = _placed(parallel, config["trainer"], speeds)
    if placed:
        runtime["balance_placed"] = parallel.get("balance", "uniform")
        parallel = {**parallel, **placed}
    return RunConfig(config).replace(parallel=parallel, runtime=runtime), said


def _placed(
    parallel: Mapping[str, Any], trainer: Mapping[str, Any], speeds: list[float]
) -> tuple[dict[str, Any], str]:
    """The ``parallel`` settings that balance ranks of ``speeds`` (none when nothing should
    change) and the line that says so."""
    if len(set(speeds)) <= 1:
        return {}, "the ranks' devices are equally fast: even shares"
    why = _cannot_balance(parallel)
    if why:
        return {}, f"{why}: every rank gets an even share and waits for the slowest"
    if parallel.get("balance_shares"):
        return {}, f"parallel.balance_shares={parallel['balance_shares']} as given"
    total = trainer["global_batch"] // trainer["micro_batch"]
    if total < len(speeds):
        return {}, f"{total} micro-batches a step cannot give {len(speeds)} ranks one each"
    mode = parallel.get("balance", "uniform")
    mode = "adaptive" if mode == "uniform" else mode
    shares = list(proportional(total, speeds).counts)
    said = f"shares {shares} of {total} micro-batches by device speed (parallel.balance={mode})"
    return {"balance": mode, "balance_shares": shares}, said
