"""The resource pool as plugins: its scheduling policies, the ``scheduler=pool`` submitter and
the ``xirang pool`` command. The pool's engine lives in :mod:`xirang_service.pool`."""

from xirang import conf_folder, hookimpl
from xirang.pool import PoolPolicySpec
from xirang.specs import CommandSpec, SchedulerSpec


@hookimpl
def xirang_schedulers() -> list[SchedulerSpec]:
    return [
        PoolPolicySpec(
            name="pool-fifo",
            target="xirang_pool.policies.fifo:Fifo",
            description="pool policy: strict arrival order, no backfill, no preemption",
        ),
        PoolPolicySpec(
            name="pool-fifo-backfill",
            target="xirang_pool.policies.backfill:FifoBackfill",
            description="pool policy: arrival order with EASY backfill (Slurm's default)",
        ),
        PoolPolicySpec(
            name="pool-priority",
            target="xirang_pool.policies.priority:PriorityQuota",
            description="default pool policy: priority, quotas, borrowing, least attained service",
        ),
        PoolPolicySpec(
            name="pool-hetero",
            target="xirang_pool.policies.hetero:HeteroAware",
            description="pool policy: Gavel-like, each job class on its best device type per cost",
        ),
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
