"""What one rank of test_llama_split.py runs (spawned through ``run_group``, which opens the
gloo group): the Llama built whole from the seed, split by the strategy's own code, one
forward and backward on a batch every rank shares."""

from __future__ import annotations

from typing import Any

import torch
from xirang_llama.model import Llama, LlamaConfig
from xirang_llama.parallelize import LlamaParallelize
from xirang_torch.mesh import build_mesh
from xirang_torch.strategy import MeshStrategy

from xirang_core.parallel.plan import ParallelPlan
from xirang_core.train.init import model_name

SEED = 7


def batch(cfg: LlamaConfig) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (4, 12), generator=torch.Generator().manual_seed(3))


def whole_step(cfg: LlamaConfig, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """Loss and gradients (by the model's names) of one step; the unsplit model by default."""
    if model is None:
        torch.manual_seed(SEED)
        model = Llama(cfg)
    x = batch(cfg)
    loss = model(x, x)
    loss.backward()
    grads = {}
    for name, param in model.named_parameters():
        grad = param.grad
        grads[model_name(name)] = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
    return {"loss": loss.detach().clone(), "grads": grads}


def split_steps(rank: int, world: int, cases: list[tuple[LlamaConfig, ParallelPlan]]) -> list:
    """Per case: the step's figures, and the layout facts the test asserts."""
    found = []
    for cfg, plan in cases:
        torch.manual_seed(SEED)
        model = Llama(cfg)
        fns = LlamaParallelize()
        mesh = build_mesh("cpu", plan.dp, plan.tp, plan.pp)
        if plan.tp > 1:
            fns.apply_tp(model, mesh["tp"], plan.sp)
        model = MeshStrategy._data_parallel(model, fns, mesh, plan, "fp32")
        result = whole_step(cfg, model)
        result["layout"] = layout(model)
        found.append(result)
    return found


def layout(model: torch.nn.Module) -> dict[str, Any]:
    """Which modules are FSDP2 units, the root's own sharded parameters, and the
    placements of the embedding and head weights."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    root_params: list[str] = []
    if isinstance(model, FSDPModule):
        group = fully_shard.state(model)._fsdp_param_group
        root_params = [] if group is None else [p._param_fqn for p in group.fsdp_params]
    return {
        "units": sorted(n for n, m in model.named_modules() if isinstance(m, FSDPModule)),
        "root_params": root_params,
        "embed": str(getattr(model.embed_tokens.weight, "placements", "")),
        "head": str(getattr(model.lm_head.weight, "placements", "")),
        "tied": model.embed_tokens.weight is model.lm_head.weight,
    }


def started_weights(rank: int, world: int, cases: list[tuple[LlamaConfig, ParallelPlan]]) -> list:
    """Per case: every parameter's whole value (gathered from the shards, by the model's own
    names) of the Llama built on the meta device, split, then materialised."""
    from xirang_core.train.init import materialize

    found = []
    for cfg, plan in cases:
        with torch.device("meta"):
            model = Llama(cfg)
        fns = LlamaParallelize()
        mesh = build_mesh("cpu", plan.dp, plan.tp, plan.pp)
        if plan.tp > 1:
            fns.apply_tp(model, mesh["tp"], plan.sp)
        model = MeshStrategy._data_parallel(model, fns, mesh, plan, "fp32")
        materialize(model, "cpu", SEED)
        found.append(
            {
                model_name(n): p.full_tensor() if hasattr(p, "full_tensor") else p.detach()
                for n, p in model.named_parameters()
            }
        )
    return found
