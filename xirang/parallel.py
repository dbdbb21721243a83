"""What a parallel strategy plugin uses: the plan it is given, the checks and degree
resolution of a plan, the compile, mixed-precision and optimizer helpers every strategy
shares, the mark of a tied weight's second copy (counted once in the gradient norm), and a
rank's measured speed with the pipeline split it gives (``parallel.stage_layers=auto``).

The names in ``__all__`` are the stable surface for strategy plugins. Importing this module
imports torch.
"""

from xirang.balance import check as check_balance
from xirang_core.parallel.grads import mark_duplicate
from xirang_core.parallel.plan import ParallelPlan, check_plan, resolve_degrees, speed_split
from xirang_core.train.balance import forward_seconds, gather, synchronize
from xirang_core.train.compile import compile_model
from xirang_core.train.optim import build_optimizer, group_params
from xirang_core.train.precision import fsdp_policy

__all__ = [
    "ParallelPlan",
    "build_optimizer",
    "check_balance",
    "check_plan",
    "compile_model",
    "forward_seconds",
    "fsdp_policy",
    "gather",
    "group_params",
    "mark_duplicate",
    "resolve_degrees",
    "speed_split",
    "synchronize",
]
