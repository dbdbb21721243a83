"""The resource pool as plugins: its scheduling policies, the ``scheduler=pool`` submitter and
the ``xirang pool`` command. The pool's engine lives in :mod:`xirang_service.pool`."""

from xirang import conf_folder, hookimpl
from xirang.specs import CommandSpec, PolicySpec, SchedulerSpec


@hookimpl
def xirang_pool_policies() -> list[PolicySpec]:
    return [
        PolicySpec(
            name="fifo",
            target="xirang_pool.policies.fifo:Fifo",
            description="strict arrival order, no backfill, no preemption",
        ),
        PolicySpec(
            name="fifo-backfill",
            target="xirang_pool.policies.backfill:FifoBackfill",
            description="arrival order with EASY backfill (Slurm's default)",
        ),
        PolicySpec(
            name="priority",
            target="xirang_pool.policies.priority:PriorityQuota",
            description="the default: priority, quotas, borrowing, least attained service",
        ),
        PolicySpec(
            name="hetero",
            target="xirang_pool.policies.hetero:HeteroAware",
            description="Gavel-like: each job class on its best device type per cost",
        ),
        PolicySpec(
            name="gavel",
            target="xirang_pool.policies.gavel:MaxMinFairness",
            description="Gavel's heterogeneity-aware max-min fairness (LAS over its allocation)",
        ),
    ]


@hookimpl
def xirang_schedulers() -> list[SchedulerSpec]:
    return [
        SchedulerSpec(
            name="pool",
            target="xirang_pool.scheduler:PoolScheduler",
            schema="xirang_pool.scheduler:PoolSchedulerConfig",
            description="submit the run to the shared pool service as a job",
        ),
    ]


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="pool",
            target="xirang_service.pool.cli:main",
            description="the shared pool: serve, status, queue, cancel, quota, simulate",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
