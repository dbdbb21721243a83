"""A plan checked at the scale it is for, in this one CPU process: the real wrapping of the
real model family on torch's fake process group, one training step under fake tensors.

``xirang plan --verify`` and ``benchmarks/scale_sim.py`` use it. The worker's own code builds
the model on the meta device, opens the plan's device mesh and lets the strategy wrap it (FSDP2
units, tensor-parallel plan, recompute, mixed precision) exactly as a run does; the process
group is torch's ``fake`` backend (``torch.testing._internal.distributed.fake_pg``), which
answers every collective at once, and the tensors are ``FakeTensorMode``'s, which carry shapes
and dtypes but no storage, so a 70B model on 256 ranks takes seconds and no memory. One step
of the run's own :class:`~xirang_core.train.loop.Trainer` (micro-batches, no_sync, clipping,
the optimizer) runs under ``FSDPMemTracker`` for memory per
category and a :class:`CommDebugMode` that also records each collective's bytes and the mesh
dimension of its group. torchtitan's ``scripts/estimate/estimation.py`` does the same for its
memory estimates.

What is measured is rank 0. Only plans FSDP2 shards are measured (not pipelines, DDP or
tensor parallel alone): :func:`unmeasured` says why.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import ParallelPlan

#: the collectives counted, by their c10d and functional op names, as one kind each
KINDS = {
    "_allgather_base_": "all_gather",
    "allgather_": "all_gather",
    "allgather_into_tensor_coalesced_": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_coalesced": "all_gather",
    "_reduce_scatter_base_": "reduce_scatter",
    "reduce_scatter_": "reduce_scatter",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "allreduce_": "all_reduce",
    "allreduce_coalesced_": "all_reduce",
    "all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "broadcast_": "broadcast",
    "alltoall_base_": "all_to_all",
    "all_to_all_single": "all_to_all",
    "send": "p2p",
    "recv_": "p2p",
}


@dataclass
class ScaleMeasurement:
    """One rank's step of a plan at its world size, as measured under fake tensors."""

    plan: str
    world: int
    params: int  # bytes of this rank's parameters (its shards)
    grads: int
    optimizer: int
    peak: int  # the most bytes of tensors live at once during the step
    at_peak: dict[str, int]  # the peak's bytes by the tracker's category
    activations: int  # the most bytes of activations (and their temporaries) at once
    #: every collective of the step: kind, mesh dimension, bytes, calls
    collectives: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0  # how long wrapping and the step took here

    def bytes_per_dim(self) -> dict[str, int]:
        """Bytes the step moves on each mesh dimension (each call's whole buffer)."""
        out: dict[str, int] = defaultdict(int)
        for c in self.collectives:
            out[c["dim"]] += c["bytes"] * c["calls"]
        return dict(out)

    def as_dict(self) -> dict[str, Any]:
        return {
            "plan": self.plan,
            "world": self.world,
            "params": self.params,
            "grads": self.grads,
            "optimizer": self.optimizer,
            "peak": self.peak,
            "at_peak": self.at_peak,
            "activations": self.activations,
            "collectives": self.collectives,
            "bytes_per_dim": self.bytes_per_dim(),
            "seconds": round(self.seconds, 2),
        }


def measure_plan(config: dict[str, Any], plan: ParallelPlan) -> ScaleMeasurement:
    """Wrap ``config``'s model as ``plan`` on a fake process group of ``plan.world`` ranks and
    measure one training step of rank 0 (``config``'s trainer: global batch, precision)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from xirang.planning.smoke import plan_config

    problem = unmeasured(plan)
    if problem:
        raise ConfigError(f"{plan.label()}: {problem}")
    if dist.is_initialized():
        raise ConfigError("--verify opens its own fake process group; run it outside one")
    started = time.perf_counter()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.world)
    try:
        measured = _step(plan_config(config, plan), plan)
    finally:
        dist.destroy_process_group()
    measured.seconds = time.perf_counter() - started
    return measured


def unmeasured(plan: ParallelPlan) -> str:
    """Why ``plan`` cannot be measured under fake tensors, or an empty string: a pipeline's
    stages exchange shapes with real values, DDP's reducer (``zero=0`` over several ranks)
    checks and buckets parameters through their storage, and the memory tracker is FSDP2's
    (torch's module tracker refuses a module called once per micro-batch)."""
    if plan.pp > 1:
        return "pipeline plans are not measured under fake tensors; verify a plan with pp=1"
    if plan.zero == 0 and plan.dp > 1:
        return "DDP (zero=0) is not measured under fake tensors; verify a plan with zero>=1"
    if plan.zero == 0 or (plan.dp == 1 and plan.tp > 1):
        return "only plans FSDP2 shards are measured (FSDPMemTracker follows its units)"
    return ""


def _step(config: dict[str, Any], plan: ParallelPlan) -> ScaleMeasurement:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from xirang.planning.meter import state_bytes
    from xirang_core.contract import RunConfig
    from xirang_core.plugins import get_registry
    from xirang_core.specs import WorkerContext
    from xirang_core.train.optim import build_optimizer
    from xirang_core.train.worker import build_model

    registry = get_registry()
    device = torch.device("cpu")
    ctx = WorkerContext(0, 0, plan.world, device, "", RunConfig(config))
    settings = {k: v for k, v in config["model"].items() if k not in ("family", "name")}
    strategy = registry.create("parallel", config["parallel"])
    model = build_model(config, settings, device, registry, True)  # on meta, as sharded runs
    ctx.mesh = strategy.build_mesh(ctx)
    wrapped = strategy.wrap(model, ctx)
    with FakeTensorMode(allow_non_fake_inputs=True):
        model.to_empty(device=device)
        model.init_buffers()  # type: ignore[operator]
        optimizer = build_optimizer(model, config["optim"])
        trainer = _trainer(config, ctx, wrapped, optimizer, strategy, registry, settings)
        tracker = _tracker(wrapped, optimizer)
        counter = ByteCounter(_dims(ctx.mesh))
        _start_states(model, optimizer)  # the measured step finds them, as every later step
        with tracker, counter:
            trainer.train_step(1)
        states = state_bytes(wrapped, optimizer)
    return _measurement(plan, states, tracker, counter)


def _trainer(
    config: dict[str, Any],
    ctx: Any,
    wrapped: Any,
    optimizer: Any,
    strategy: Any,
    registry: Any,
    settings: dict[str, Any],
) -> Any:
    """The run's own loop for one step over synthetic batches of the run's shape."""
    from xirang_core.train.loop import LoopSettings, Trainer

    trainer_cfg, seq_len = config["trainer"], config["data"]["seq_len"]
    micro = trainer_cfg["micro_batch"]
    accum = trainer_cfg["global_batch"] // ctx.data_world // micro
    batches = ShapedBatches(micro, seq_len)
    loop = LoopSettings(
        1, accum, micro, seq_len, 1, trainer_cfg["grad_clip"], config["optim"], 0.0, 0.0
    )
    loop.precision = trainer_cfg.get("precision", "fp32")
    runner = strategy.runner(wrapped)

    class FakeStepTrainer(Trainer):
        def _finite(self, step: int, loss: Any, norm: Any) -> bool:
            return True  # fake tensors hold no values to read: the step always goes on

    return FakeStepTrainer(
        wrapped, optimizer, batches, loop, ctx, registry.hook, None, None, runner
    )


def _start_states(model: Any, optimizer: Any) -> None:
    """Let the optimizer create its states (Adam's moments) with one step on zero gradients:
    what a run holds from its second step on, without a first step's forwards."""
    import torch

    for param in model.parameters():
        if param.requires_grad:
            param.grad = torch.zeros_like(param)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


class ShapedBatches:
    """Token batches of the run's shape and no values (fake tensors carry none): what the
    loop asks of its batches, for a step whose arithmetic is never read."""

    def __init__(self, micro: int, seq_len: int) -> None:
        self.shape = (micro, seq_len)

    def get(self, step: int, micro: int = 0) -> tuple[Any, Any]:
        import torch

        tokens = torch.zeros(self.shape, dtype=torch.long)
        return tokens, tokens

    def loss_weight(self, step: int, micro: int) -> float:
        return 1.0


def _tracker(wrapped: Any, optimizer: Any) -> Any:
    """FSDP2's memory tracker: it tells sharded from gathered parameters and the
    collectives' buffers, and follows a module called once per micro-batch."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    return FSDPMemTracker(cast(Any, wrapped), optimizer)


def _dims(mesh: Any) -> dict[str, str]:
    """Process group name -> mesh dimension name (``dp``, ``tp``, ``pp``, ``dp_tp``)."""
    if mesh is None:
        return {}
    names = list(mesh.mesh_dim_names or ())
    names += [n for n in ("dp_tp",) if n not in names and _has(mesh, n)]
    return {mesh[n].get_group().group_name: n for n in names if mesh[n].size() > 1}


def _has(mesh: Any, name: str) -> bool:
    try:
        mesh[name]
    except (KeyError, RuntimeError):
        return False
    return True


def _measurement(
    plan: ParallelPlan, states: dict[str, int], tracker: Any, counter: ByteCounter
) -> ScaleMeasurement:
    peak = tracker.get_tracker_snapshot("peak")
    # the trackers' categories (``_FSDPRefType.ACT``, ``_MemRefType.OPT``, "Total") by name
    at_peak = {
        str(k).rsplit(".", 1)[-1].lower(): int(v) for k, v in next(iter(peak.values()), {}).items()
    }
    total = at_peak.pop("total", sum(at_peak.values()))
    return ScaleMeasurement(
        plan=plan.label(),
        world=plan.world,
        params=states["params"],
        grads=states["grads"],
        optimizer=states["optimizer"],
        peak=total,
        at_peak=at_peak,
        activations=at_peak.get("act", 0) + at_peak.get("temp", 0),
        collectives=counter.rows(),
    )


class ByteCounter:
    """Every collective of the step, kept per (kind, mesh dimension, bytes) with its calls; a
    call's bytes are its whole buffer (an all-gather's output, a reduce-scatter's input, an
    all-reduce's tensor), as the planner's collectives count them.

    The ops are those :class:`~torch.distributed.tensor.debug.CommDebugMode` counts (c10d's
    and the functional collectives), seen the same way: a dispatch mode that lets DTensor
    turn its ops into collectives first. CommDebugMode itself is not entered: its module
    tracker fails on a tensor-parallel block inside a checkpoint wrapper (torch 2.13,
    ``_fw_set_module_hook``: list index out of range)."""

    def __init__(self, dims: dict[str, str]) -> None:
        from torch.distributed.tensor import DTensor
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None):
                if any(t is DTensor for t in types):
                    return NotImplemented  # DTensor first issues its collectives, seen here
                counter.see(func, args, kwargs or {})
                return func(*args, **(kwargs or {}))

        self.dims: dict[str, str] = dims
        self.calls: dict[tuple[str, str, int], int] = defaultdict(int)
        self.mode = _Mode()

    def __enter__(self) -> ByteCounter:
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)

    def see(self, func: Any, args: Any, kwargs: dict[str, Any]) -> None:
        kind = KINDS.get(getattr(func, "_overloadpacket", func).__name__)
        if kind is None:
            return
        self.calls[(kind, self._dim(args, kwargs), _buffer_bytes(args))] += 1

    def _dim(self, args: Any, kwargs: dict[str, Any]) -> str:
        for value in [*args, *kwargs.values()]:
            name = _group_name(value)
            if name is not None:
                return self.dims.get(name, name)
        return "?"

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"kind": k, "dim": d, "bytes": b, "calls": n}
            for (k, d, b), n in sorted(self.calls.items())
        ]


def _group_name(value: Any) -> str | None:
    """The process group's name of a collective's argument: a functional collective's group
    name string, or a c10d op's boxed ``ProcessGroup``."""
    import torch.distributed as dist

    if isinstance(value, str) and value.isdigit():
        return value
    try:
        return dist.ProcessGroup.unbox(value).group_name  # type: ignore[no-any-return]
    except (RuntimeError, TypeError, AttributeError):
        return None


def _buffer_bytes(args: Any) -> int:
    """The call's whole buffer: the largest tensor among its arguments (an all-gather's
    output, a reduce-scatter's input, an all-reduce's tensor)."""
    import torch

    sizes = [0]
    for value in args:
        found = value if isinstance(value, list | tuple) else [value]
        for t in found:
            if isinstance(t, torch.Tensor):
                sizes.append(t.numel() * t.element_size())
            elif isinstance(t, list | tuple):
                sizes += [x.numel() * x.element_size() for x in t if isinstance(x, torch.Tensor)]
    return max(sizes)
