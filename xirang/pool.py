"""What a pool-policy or pool-scheduler plugin uses: the policy base class, its spec and the
read-only view of the engine, jobs, card throughputs, and the client of the pool service.

The names in ``__all__`` are the stable surface for pool plugins; they need the ``xirang[pool]``
extra's service package. Importing this module does not import torch.
"""

from xirang_service.pool.cards import Throughputs
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.jobs import Job
from xirang_service.pool.policy import Policy, PoolPolicySpec, PoolView

__all__ = [
    "Job",
    "Policy",
    "PoolClient",
    "PoolError",
    "PoolPolicySpec",
    "PoolView",
    "Throughputs",
]
