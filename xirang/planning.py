"""What a planner plugin uses (``parallel=auto``, ``parallel.planner=<name>``): the
:class:`Planner` protocol and the :class:`PlanChoice` it returns, the plan and model-shape types,
the machines a plan is for, the memory model and each worker's measured runtime beyond its
tensors, the probes that measure this host (workers, links, wrapper costs), and the smoke run
that trains a few plans for a few steps.

The names in ``__all__`` are the stable surface for planner plugins. Importing this module does
not import torch.
"""

from xirang_core.comm.cost_model import Link, fit_link, ring_time
from xirang_core.comm.launch import run_group
from xirang_core.config import compose
from xirang_core.devices.calibration import synchronizer
from xirang_core.devices.cores import available_cores
from xirang_core.parallel.cluster import Cluster, local_cluster
from xirang_core.parallel.memory import (
    MemoryEstimate,
    predict_memory,
    stage_layer_count,
    stage_memory,
    stage_params,
)
from xirang_core.parallel.ondevice import RunDevice, run_device
from xirang_core.parallel.plan import (
    MICRO_BATCHES,
    ModelShape,
    ParallelPlan,
    PlanError,
    candidate_plans,
    degrees_on,
    plan_problem,
    stage_layers_problem,
)
from xirang_core.parallel.planning import PlanChoice, Planner
from xirang_core.parallel.resolve import model_shape
from xirang_core.parallel.runtime_memory import RuntimeMemory, cached_runtime, with_runtime
from xirang_core.parallel.smoke import run_plans
from xirang_core.parallel.together import time_together
from xirang_core.parallel.wrapper_costs import GROUP, WrapperCosts, derive, measure_wrappers
from xirang_core.terminal import help_text

__all__ = [
    "GROUP",
    "MICRO_BATCHES",
    "Cluster",
    "Link",
    "MemoryEstimate",
    "ModelShape",
    "ParallelPlan",
    "PlanChoice",
    "PlanError",
    "Planner",
    "RunDevice",
    "RuntimeMemory",
    "WrapperCosts",
    "available_cores",
    "cached_runtime",
    "candidate_plans",
    "compose",
    "degrees_on",
    "derive",
    "fit_link",
    "help_text",
    "local_cluster",
    "measure_wrappers",
    "model_shape",
    "plan_problem",
    "predict_memory",
    "ring_time",
    "run_device",
    "run_group",
    "run_plans",
    "stage_layer_count",
    "stage_layers_problem",
    "stage_memory",
    "stage_params",
    "synchronizer",
    "time_together",
    "with_runtime",
]
