"""The settings of ``parallel=ddp`` and the mesh strategies (fsdp, tp, pp, hybrids), apart
from the strategies: checked when the run's config is composed, without importing torch."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from xirang import ConfigError
from xirang.launch import check_balance, run_workers
from xirang.planning import degrees_on, speed_split, stage_layers_problem

#: what ``parallel.recompute`` may be
MODES = ("none", "full", "selective")
#: ``parallel.stage_layers`` chosen from the stages' measured speed and memory
AUTO = "auto"


def check_settings(mode: str, every: int) -> str | None:
    """Why ``parallel.recompute`` / ``parallel.recompute_every`` cannot run, or None."""
    if mode not in MODES:
        return f"parallel.recompute={mode!r}: valid values are {', '.join(MODES)}"
    if every < 0:
        return f"parallel.recompute_every={every}: must be 0 (op-level) or a layer count >= 1"
    if every and mode != "selective":
        return (
            f"parallel.recompute_every={every} applies to parallel.recompute=selective only "
            f"(got recompute={mode})"
        )
    return None


@dataclass
class DDPConfig:
    bucket_cap_mb: int = 25
    static_graph: bool = False
    balance: str = "uniform"  # uniform | calibrated | adaptive (xirang_core.train.balance)
    balance_every: int = 10  # adaptive: steps between moves of the shares
    balance_shares: list[int] = field(default_factory=list)  # fixed micro-batches per rank

    @staticmethod
    def check(data: dict[str, Any]) -> None:
        """``parallel.balance*``: checked at compose for the run's workers."""
        check_balance(data, run_workers(data)[0])


@dataclass
class MeshConfig:
    """Degrees (0 = the workers the others leave), ZeRO stage, recompute and pipeline schedule."""

    dp: int = 0
    tp: int = 1
    pp: int = 1
    sp: bool = False
    zero: int = 3
    recompute: str = "none"  # none | full | selective (see xirang_torch.recompute)
    recompute_every: int = 0  # selective: 0 = op-level policy, N = every Nth layer in full
    schedule: str = "1f1b"
    #: layers per pipeline stage, first to last (empty: balanced); the planner's uneven split
    #: for stages on devices of unequal speed or memory (``xirang plan`` on a mixed cluster),
    #: or ``auto``: chosen at start-up from the stages' measured speed and memory (a list or
    #: a word, so no list default: OmegaConf would then take no word)
    stage_layers: Any = None
    balance: str = "uniform"  # uniform | calibrated | adaptive: data parallel only (fsdp)
    balance_every: int = 10  # adaptive: steps between moves of the shares
    balance_shares: list[int] = field(default_factory=list)  # fixed micro-batches per rank

    @staticmethod
    def check(data: dict[str, Any]) -> None:
        """``parallel.recompute*`` and ``parallel.balance*``: checked at compose for the run's
        workers."""
        section = data["parallel"]
        problem = check_settings(
            section.get("recompute", "none"), section.get("recompute_every", 0)
        )
        if problem:
            raise ConfigError(problem)
        check_stage_layers(data)
        check_balance(data, run_workers(data)[0])


def check_stage_layers(data: dict[str, Any]) -> None:
    """``parallel.stage_layers`` against the pipeline's stages and the model's layers, at
    compose: one per stage, each at least 1, summing to the layer count. Only a run that gives
    it loads the family's split plan (and so torch) to learn which setting counts layers."""
    section = data["parallel"]
    given = section.get("stage_layers") or []
    degrees = degrees_on(run_workers(data)[0], section)
    if not given or degrees is None:  # wrong degrees are refused before launch, with the fits
        return
    if given == AUTO and degrees[2] < 2:
        raise ConfigError(
            f"parallel.stage_layers=auto: needs a pipeline (pp >= 2); this run has "
            f"pp={degrees[2]} (set parallel.pp and trainer.nproc, or drop parallel.stage_layers)"
        )
    if isinstance(given, str) and given != AUTO:
        raise ConfigError(
            f"parallel.stage_layers={given}: give auto (by the devices' measured speed and "
            f"memory) or a list of layers per stage, e.g. [1,3]"
        )
    from xirang import get_registry

    family = data["model"]["family"]
    spec = get_registry().spec("model", family)
    if not spec.parallelize:
        raise ConfigError(
            f"parallel.stage_layers: model family '{family}' cannot be cut into pipeline "
            f"stages (it declares no parallelize plan); drop parallel.stage_layers"
        )
    fns = spec.load_parallelize()
    if "bounds" not in inspect.signature(fns.split_stage).parameters:
        raise ConfigError(
            f"parallel.stage_layers: model family '{family}' cuts only balanced stages (its "
            f"split_stage takes no bounds); drop parallel.stage_layers"
        )
    layers = int(data["model"][fns.layers_setting])
    if given == AUTO:  # which split is known only once the workers measured their devices
        speed_split([1.0] * degrees[2], layers)  # refuses more stages than layers
        return
    problem = stage_layers_problem(list(given), degrees[2], layers)
    if problem:
        raise ConfigError(problem)
