"""The resource pool: logical cards, quotas, priorities, preemption and topology.

The pool is xirang's policy layer over a shared cluster of mixed accelerators. Its core is one
state machine, :class:`~xirang_service.pool.engine.PoolEngine`, which the REST service
(``xirang pool serve``) and the trace-driven simulator (``xirang pool simulate``) both drive, so a
policy measured in simulation is the policy that runs. Policies are plugins registered through the
``xirang_schedulers`` hook (see :mod:`xirang_service.pool.policy`); executors (local, Slurm,
Kubernetes) run what the engine placed.
"""

from xirang_service.pool.cards import Throughputs
from xirang_service.pool.cluster import Inventory, Node
from xirang_service.pool.engine import PoolEngine
from xirang_service.pool.jobs import Job, JobState
from xirang_service.pool.quota import Project, QuotaBook

__all__ = [
    "Inventory",
    "Job",
    "JobState",
    "Node",
    "PoolEngine",
    "Project",
    "QuotaBook",
    "Throughputs",
]
