"""Per-device peak memory of a plan: model states, gathered parameters, activations, logits.

Activations follow Korthikanti et al. 2022 (Table 2), counted in elements of ``dtype_bytes``
and without dropout masks (xirang's models train without dropout by default):

- per layer and micro-batch, ``s·b·h·16`` elements unsplit: the norms' inputs and outputs (4),
  q, k, v (3), attention output and projection input (1... the paper's 11 minus masks), MLP
  up-projection and activation outputs (8). The attention core ``5·a·s²·b`` is not stored:
  scaled-dot-product attention recomputes it (the paper's "selective recompute").
- tensor parallel splits 12 of the 16 by ``t``; the norms' 4 stay whole.
- sequence parallel as DTensor does it splits the norms too but keeps the two all-gathered norm
  outputs that feed the column-parallel layers: ``2 + 14/t``.
- other blocks give their split part as ``ModelShape.split_activations``: a Llama layer keeps
  q (1), k and v (2·kv_heads/heads), the attention output (1) and SwiGLU's gate, activation,
  up and product (4·ffn/h) in place of the 12.
- full recompute keeps only each layer's input (``1``, or ``1/t`` under sequence parallel).
- the last stage adds the final norm (2) and the softmax output of the logits ``s·b·V``.

Model states follow ZeRO (Rajbhandari et al. 2020) with fp32 Adam: parameters and gradients one
copy each, optimizer two; sharded over ``dp`` from stage 1 (optimizer), 2 (gradients) and here
also parameters (FSDP2 shards them at every stage), plus the parameters FSDP gathers whole for
compute: all of them at zero 1 and 2, the root unit and one layer at zero 3. Under a pipeline
torch's stage keeps gathered parameters and whole gradients until the step's last backward, so
every ZeRO stage holds them there.

Communication buffers: DDP (every ``zero=0`` plan with ``dp > 1``) copies the gradients into
flat bucket tensors it allocates once, a second copy of the local gradients (the bucket size
only groups them). FSDP (``zero >= 1``, ``dp > 1``) copies one unit at a time: the all-gather's
flat output before it is copied out into the unit's parameters, and the reduce-scatter's flat
input the unit's whole gradients are copied into; at most the largest unit of each at once.

Full recompute rebuilds one layer's activations of one micro-batch during that layer's backward
(torch.utils.checkpoint re-runs its forward under its own saved-tensor hooks, so tensor
accounting does not see them): ``recomputed`` holds one layer's activations as stored without
recompute, beside the layer inputs kept.

Beyond tensors, a worker's runtime (code, the runtime's own memory, allocator slack) is
measured per host (:mod:`xirang_planner.runtime_memory`) and charged as ``runtime``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from xirang.planning import ModelShape, ParallelPlan, stage_bounds

#: Adam keeps two moments per parameter
OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes on the most loaded device."""

    params: int
    grads: int
    optimizer: int
    gathered: int
    activations: int
    stage: int = 0
    buffers: int = 0  # DDP's gradient buckets, FSDP's flat all-gather/reduce-scatter copies
    recomputed: int = 0  # one layer's activations, rebuilt during its backward (full recompute)
    runtime: int = 0  # the worker's runtime beyond tensors, measured on this host
    slack: int = 0  # freed memory the allocator keeps, growing with a micro-batch (runtime.py)

    @property
    def tensors(self) -> int:
        """What tensor accounting of states, activations and gathered parameters sees."""
        return self.params + self.grads + self.optimizer + self.gathered + self.activations

    @property
    def total(self) -> int:
        return self.tensors + self.buffers + self.recomputed + self.runtime + self.slack

    def as_dict(self) -> dict[str, int]:
        return {**asdict(self), "total": self.total}


@dataclass(frozen=True)
class StageParams:
    """Parameter elements one tensor-parallel rank of one stage holds, by unit."""

    layers: int  # all of this stage's layers
    layer: int  # one layer
    root: int  # embeddings, final norm, head: FSDP's root unit

    @property
    def total(self) -> int:
        return self.layers + self.root


def predict_memory(
    shape: ModelShape,
    plan: ParallelPlan,
    global_batch: int,
    optimizer: str = "adamw",
    compute_bytes: int | None = None,
) -> MemoryEstimate:
    """The worst stage's memory (stages differ: the first holds more micro-batches in flight,
    the last the logits). ``compute_bytes`` (the cluster's ``dtype_bytes``; default the
    shape's) is the width the run computes in: 2 for bf16 mixed precision, whose gathered
    parameters and activations are 16-bit while the states stay ``shape.dtype_bytes``."""
    stages = [
        stage_memory(shape, plan, global_batch, optimizer, s, compute_bytes) for s in range(plan.pp)
    ]
    return max(stages, key=lambda m: m.total)


def stage_params(shape: ModelShape, plan: ParallelPlan, stage: int) -> StageParams:
    h, t = shape.hidden, plan.tp
    norms = 4 * h  # at most: the norms stay whole on every tensor-parallel rank
    layer = (shape.layer_size() - norms) // t + norms
    count = plan.layer_counts(shape.layers)[stage]
    first, last = stage == 0, stage == plan.pp - 1
    embed = shape.vocab * h // (t if shape.vocab_parallel else 1)
    root = (embed + shape.positions * h) if first else 0
    if last:
        root += 2 * h
        if not (first and shape.tied_embeddings):
            root += embed  # the head: its own copy unless tied within the same stage
    return StageParams(layers=count * layer, layer=layer, root=root)


def stage_layer_count(layers: int, stage: int, stages: int) -> int:
    """Balanced contiguous split: later stages take the remainder (the first holds embeddings)."""
    lo, hi = stage_bounds(layers, stage, stages)
    return hi - lo


def stage_memory(
    shape: ModelShape,
    plan: ParallelPlan,
    global_batch: int,
    optimizer: str,
    stage: int,
    compute_bytes: int | None = None,
) -> MemoryEstimate:
    """The stage's peak. With more than one micro-batch, zero 1 (and, under a pipeline, torch's
    PipelineStage at any ZeRO stage) defers the reduce-scatter and resharding to the step's
    last backward: whole gradients and parameters stay from the first backward on. GPipe has
    freed one micro-batch's activations by then, so its peak is the larger of the forward
    phase's end and the first backward's."""
    m = plan.micro_batches(global_batch)
    acts = activation_elements(shape, plan, global_batch, stage)
    width = Widths(shape.dtype_bytes, compute_bytes or shape.dtype_bytes)
    deferred = plan.dp > 1 and m > 1 and (plan.zero == 1 or (plan.pp > 1 and plan.zero >= 1))
    if not deferred:
        return _memory(shape, plan, optimizer, stage, acts, width, deferred=False)
    held = _memory(shape, plan, optimizer, stage, acts, width, deferred=True)
    if plan.pp == 1 or plan.schedule != "gpipe":
        return held
    forward = _memory(shape, plan, optimizer, stage, acts, width, deferred=False)
    backward = _memory(shape, plan, optimizer, stage, acts * (m - 1) / m, width, deferred=True)
    return max(forward, backward, key=lambda e: e.total)


def _memory(
    shape: ModelShape,
    plan: ParallelPlan,
    optimizer: str,
    stage: int,
    acts: float,
    width: Widths,
    deferred: bool,
) -> MemoryEstimate:
    """Bytes of one moment: model states (whole gradients and gathered parameters when the
    reduction is ``deferred``), parameters FSDP gathers, and ``acts`` activation elements."""
    params = stage_params(shape, plan, stage)
    shard = plan.dp if plan.zero >= 1 else 1
    local = params.total / shard
    grads = local + params.total if deferred else local
    states = OPTIMIZER_STATES.get(optimizer, 2) * local
    if (plan.zero in (1, 2) or deferred) and plan.dp > 1:
        gathered = params.total
    elif plan.zero == 3 and plan.dp > 1:
        gathered = params.root + params.layer
    else:
        gathered = 0
    return MemoryEstimate(
        params=round(local * width.state),
        grads=round(grads * width.state),
        optimizer=round(states * width.state),
        gathered=round(gathered * width.compute),
        activations=round(acts * width.compute),
        stage=stage,
        buffers=round(comm_buffer_bytes(plan, params, width)),
        recomputed=round(recomputed_elements(shape, plan) * width.compute),
    )


@dataclass(frozen=True)
class Widths:
    """Bytes per element: of the model states (fp32 master weights, gradients and moments
    under mixed precision) and of what the run computes with (gathered parameters,
    activations: 2 under bf16)."""

    state: int
    compute: int


def comm_buffer_bytes(plan: ParallelPlan, params: StageParams, width: Widths) -> float:
    """Bytes of the flat buffers a data-parallel wrapper copies through (module docstring):
    DDP's buckets hold every local gradient, FSDP's all-gather output (in the compute width)
    and reduce-scatter input (gradients reduce in the state width) one unit each."""
    if plan.dp == 1:
        return 0.0
    if plan.zero == 0:
        return float(params.total) * width.state
    return float(max(params.layer, params.root)) * (width.compute + width.state)


def recomputed_elements(shape: ModelShape, plan: ParallelPlan) -> float:
    """Elements full recompute rebuilds at once: one layer of one micro-batch, as it would be
    stored without recompute (0 when nothing is recomputed)."""
    if plan.recompute == "none":
        return 0.0
    whole = replace(plan, recompute="none")
    sbh = plan.micro_batch * shape.seq_len * shape.hidden
    return sbh * per_layer_factor(whole, shape.split_activations)


def activation_elements(
    shape: ModelShape, plan: ParallelPlan, global_batch: int, stage: int
) -> float:
    """Elements saved for backward at the peak of one step on ``stage``."""
    b, s, h = plan.micro_batch, shape.seq_len, shape.hidden
    sbh = s * b * h
    layers = plan.layer_counts(shape.layers)[stage]
    per_micro = layers * sbh * per_layer_factor(plan, shape.split_activations)
    if stage == plan.pp - 1:
        per_micro += 2 * sbh + s * b * shape.vocab / (plan.tp if shape.vocab_parallel else 1)
    return per_micro * in_flight(plan, global_batch, stage)


def per_layer_factor(plan: ParallelPlan, split: float = 12.0) -> float:
    """Activation elements per layer in units of s·b·h, of which ``split`` are split by tensor
    parallel (see the module docstring)."""
    t = plan.tp
    if plan.recompute == "full":
        return 1 / t if plan.sp else 1.0
    if plan.sp:
        return 2 + (split + 2) / t
    return 4 + split / t


def in_flight(plan: ParallelPlan, global_batch: int, stage: int) -> float:
    """Micro-batches whose activations a stage holds at once. Without a pipeline each
    micro-batch's backward follows its forward. GPipe keeps all of a step's micro-batches;
    1F1B keeps ``pp - stage``, and torch's schedule lets the first stage start the next
    forward before its oldest backward (measured: about half a micro-batch more)."""
    m = plan.micro_batches(global_batch)
    if plan.pp == 1:
        return 1
    if plan.schedule == "gpipe":
        return m
    extra = 0.5 if stage == 0 and m > plan.pp else 0.0
    return min(m, plan.pp - stage) + extra
