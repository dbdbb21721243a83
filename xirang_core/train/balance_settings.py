"""``parallel.balance*`` checked when a run's config is composed, apart from the balancer
(:mod:`xirang_core.train.balance`, which needs torch): a strategy's settings schema calls
:func:`check` without importing torch."""

from __future__ import annotations

from typing import Any

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
    name = parallel["name"]
    split = [k for k in ("tp", "pp") if parallel.get(k, 1) not in (1,)] + (
        ["sp"] if parallel.get("sp") else []
    )
    if name not in STRATEGIES or split:
        raise ConfigError(
            f"parallel.balance={mode}: parallel={name}"
            f"{' with ' + ', '.join(split) if split else ''} cannot balance; it works with "
            f"parallel=ddp or parallel=fsdp (data parallel only), or use parallel.balance=uniform"
        )
    total = trainer["global_batch"] // trainer["micro_batch"]  # compose: a whole number
    if given and (len(given) != world or min(given) < 1 or sum(given) != total):
        raise ConfigError(
            f"parallel.balance_shares={given}: give {world} whole numbers, each at least 1, "
            f"summing to global_batch / micro_batch = {total}"
        )
    if parallel.get("balance_every", 1) < 1:
        raise ConfigError("parallel.balance_every: must be at least 1 step")
