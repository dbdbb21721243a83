"""Before launch: turn ``parallel=auto`` into the configured planner's best plan, and refuse a
named plan that cannot work (so no worker process starts for it)."""

from __future__ import annotations

import logging
from typing import Any

from xirang_core.config import run_workers
from xirang_core.contract import RunConfig
from xirang_core.errors import ConfigError
from xirang_core.parallel.cluster import local_cluster
from xirang_core.parallel.plan import ModelShape, ParallelPlan, PlanError, check_plan, plan_problem
from xirang_core.parallel.planning import DEFAULT_PLANNER
from xirang_core.plugins import Registry

log = logging.getLogger("xirang.plan")
#: worker counts tried when a plan needs another one (the counts named are the first few)
MAX_WORKERS = 64


def model_shape(config: dict[str, Any], registry: Registry) -> ModelShape | None:
    """The configured model's shape from its family's split plan, or None without one."""
    spec = registry.spec("model", config["model"]["family"])
    if not spec.parallelize:
        return None
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    return spec.load_parallelize().shape(settings, config["data"]["seq_len"])


def resolve_parallel(config: RunConfig, registry: Registry) -> RunConfig:
    """The config with ``parallel`` (and ``trainer.micro_batch``, ``grad_accum``) settled for
    the run's workers: ``parallel=auto`` becomes the planner's plan; a named plan that cannot
    work stops here."""
    trainer = config["trainer"]
    if config["parallel"]["name"] == "auto":
        plan = choose_plan(config, registry)
        accum = trainer["global_batch"] // plan.dp // plan.micro_batch
        config = config.replace(
            parallel=plan.settings(),
            trainer={**trainer, "micro_batch": plan.micro_batch, "grad_accum": accum},
        )
        log.warning("parallel=auto chose %s (%s)", plan.label(), plan.strategy())
    else:
        strategy = registry.create("parallel", config["parallel"])
        shape = model_shape(config, registry)
        if hasattr(strategy, "plan") and shape is not None:
            plan = plan_on_workers(config, strategy, shape)
            check_plan(plan, shape, trainer["global_batch"])
    note_one_worker(config, registry)
    return config


def note_one_worker(config: dict[str, Any], registry: Registry) -> None:
    """One warning line for each choice that acts between workers when there is only one: it
    runs, but a user who asked for it should not believe it did something."""
    if run_workers(config)[0] > 1:  # on several nodes too
        return
    strategy, comm = config["parallel"]["name"], config["comm"]["name"]
    if registry.spec("parallel", strategy).multi_process:
        log.warning(
            "parallel=%s runs on one worker (trainer.nproc=1), so nothing is split or "
            "replicated; trainer.nproc=N runs it on N workers",
            strategy,
        )
    if comm != "auto":
        log.warning(
            "comm=%s changes how workers exchange gradients; with one worker (trainer.nproc=1) "
            "there is no exchange, so it does nothing in this run",
            comm,
        )


def plan_on_workers(config: dict[str, Any], strategy: Any, shape: ModelShape) -> ParallelPlan:
    """The strategy's plan for ``trainer.nproc`` workers. When the worker count is what stops
    it (``parallel=sp`` or ``parallel.tp=2`` on one worker), the error names ``trainer.nproc``
    and the counts it runs on, rather than the splits of a world size the user never set."""
    trainer, name = config["trainer"], config["parallel"]["name"]
    nproc, global_batch = run_workers(config)[0], trainer["global_batch"]
    try:
        plan = strategy.plan(nproc, trainer["micro_batch"])
    except PlanError as exc:
        plan, error, reason = None, exc, str(exc).partition(". Valid splits")[0]
    else:
        reason = plan_problem(plan, shape, global_batch)
        if not reason or nproc > 1:
            return plan  # on several workers check_plan names the plans that fit them
    counts = [n for n in range(1, MAX_WORKERS + 1) if _runs_on(strategy, n, shape, global_batch)]
    if not counts:  # no worker count helps: the plan's own error says what does
        if plan is None:
            raise error
        return plan
    raise PlanError(
        f"parallel={name} cannot run on trainer.nproc={nproc} worker(s): {reason}. "
        f"It runs with trainer.nproc={' or '.join(map(str, counts[:4]))}"
    )


def _runs_on(strategy: Any, workers: int, shape: ModelShape, global_batch: int) -> bool:
    """Whether some micro-batch lets the strategy's degrees run on ``workers`` workers."""
    try:
        plan = strategy.plan(workers, 1)
    except PlanError:
        return False
    return not plan_problem(plan, shape, global_batch)


def choose_plan(config: RunConfig, registry: Registry) -> ParallelPlan:
    """The configured planner's choice for this machine, or the measured best of its top few
    (``parallel.smoke``)."""
    shape = model_shape(config, registry)
    if shape is None:
        raise ConfigError(
            f"parallel=auto needs the model family '{config['model']['family']}' to declare "
            f"how it splits (a parallelize plan); choose parallel=single or parallel=ddp"
        )
    trainer, auto = config["trainer"], config["parallel"]
    cluster = local_cluster(trainer["nproc"], registry, config["device"]["name"])
    planner = registry.load("planner", auto.get("planner", DEFAULT_PLANNER))()
    choice = planner.choose(config, shape, cluster)
    if not auto.get("smoke"):
        return choice.plan
    top = list(choice.ranking[: auto.get("smoke_top", 3)])
    steps = auto.get("smoke_steps", 3)
    measured = registry.hook.xirang_measure_plans(config=config, plans=top, steps=steps)
    return min(zip(top, measured, strict=True), key=lambda pm: pm[1])[0]
