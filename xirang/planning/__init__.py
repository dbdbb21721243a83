"""What a planner plugin uses (``parallel=auto``, ``parallel.planner=<name>``): the
:class:`Planner` protocol and the :class:`PlanChoice` it returns, the plan and model-shape types,
the machines a plan is for, the probes that measure this host (workers, links), where its
measurements are kept, the smoke run that trains a few plans (or configs) for a few steps, and
the measurement of a plan at its world size on a fake process group (``measure_plan``).
The memory model, the runtime's measured memory and the wrappers' costs are the built-in
planner's own (``xirang_planner``).

The names in ``__all__`` are the stable surface for planner plugins. Importing this module does
not import torch.
"""

from xirang.comm.cost_model import Link, fit_link, ring_time
from xirang.comm.launch import run_group
from xirang.devices.calibration import cache_path as calibration_path
from xirang.devices.synchronize import synchronizer
from xirang.planning.ondevice import RunDevice, run_device
from xirang.planning.scale import ScaleMeasurement, measure_plan, unmeasured
from xirang.planning.smoke import plan_config, run_configs, run_plans
from xirang_core.config import compose
from xirang_core.devices.cores import available_cores
from xirang_core.parallel.cluster import ClusterShape, local_cluster
from xirang_core.parallel.plan import (
    MICRO_BATCHES,
    ModelShape,
    ParallelPlan,
    PlanError,
    candidate_plans,
    degrees_on,
    plan_problem,
    speed_split,
    stage_bounds,
    stage_layers_problem,
)
from xirang_core.parallel.planning import PlanChoice, Planner
from xirang_core.parallel.resolve import model_shape
from xirang_core.terminal import help_text

__all__ = [
    "MICRO_BATCHES",
    "ClusterShape",
    "Link",
    "ModelShape",
    "ParallelPlan",
    "PlanChoice",
    "PlanError",
    "Planner",
    "RunDevice",
    "ScaleMeasurement",
    "available_cores",
    "calibration_path",
    "candidate_plans",
    "compose",
    "degrees_on",
    "fit_link",
    "help_text",
    "local_cluster",
    "measure_plan",
    "model_shape",
    "plan_config",
    "plan_problem",
    "ring_time",
    "run_configs",
    "run_device",
    "run_group",
    "run_plans",
    "speed_split",
    "stage_bounds",
    "stage_layers_problem",
    "synchronizer",
    "unmeasured",
]
