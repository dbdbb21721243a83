"""The Llama family's split plan: the planner's shape, pipeline stages that chain exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from xirang_llama.model import Llama, LlamaConfig
from xirang_llama.parallelize import LlamaParallelize
from xirang_planner.memory import stage_params

from xirang_core.errors import ConfigError
from xirang_core.parallel.plan import ParallelPlan, PlanError, check_plan

CFG = LlamaConfig(dim=32, n_layers=3, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=40)


@pytest.mark.parametrize("tied", [False, True])
def test_shape_counts_every_parameter(tied: bool) -> None:
    cfg = LlamaConfig(**{**vars(CFG), "tie_embeddings": tied})
    model = Llama(cfg)
    shape = LlamaParallelize().shape(vars(cfg), seq_len=8)
    assert shape.params == model.num_params(non_embedding=False)
    assert shape.layer_params == sum(p.numel() for p in model.layers["0"].parameters())
    assert (shape.layers, shape.hidden, shape.heads, shape.kv_heads) == (3, 32, 4, 2)
    assert shape.tied_embeddings is tied
    # the memory model counts what the module holds (its norms at LayerNorm's 2h at most)
    whole = stage_params(shape, ParallelPlan(), 0).total
    assert shape.params <= whole <= shape.params + (2 * shape.layers + 1) * shape.hidden


def test_tensor_parallel_must_divide_the_key_value_heads() -> None:
    shape = LlamaParallelize().shape(vars(CFG), seq_len=8)
    check_plan(ParallelPlan(tp=2, micro_batch=1), shape, 4)
    with pytest.raises(PlanError, match="2 key/value heads"):
        check_plan(ParallelPlan(tp=4, micro_batch=1), shape, 4)


@pytest.mark.parametrize("tied", [False, True])
def test_stages_chain_to_the_whole_model(tied: bool) -> None:
    """Cut into 3 stages, the stages' forwards in sequence give the unsplit logits, each
    stage keeps the whole model's parameter names, and only a tied model shares a weight."""
    torch.manual_seed(0)
    whole = Llama(LlamaConfig(**{**vars(CFG), "tie_embeddings": tied}))
    plan = LlamaParallelize()
    stages = [copy.deepcopy(whole) for _ in range(3)]
    ranges = [plan.split_stage(m, i, 3) for i, m in enumerate(stages)]
    assert ranges == [(0, 1), (1, 2), (2, 3)]
    x = torch.randint(0, CFG.vocab_size, (2, 8))
    assert torch.allclose(stages[2](stages[1](stages[0](x))), whole(x), atol=1e-6)
    names = set(dict(whole.named_parameters()))
    for stage in stages:
        assert set(dict(stage.named_parameters())) <= names
    assert stages[1].embed_tokens is None and stages[1].lm_head is None
    if tied:
        assert plan.tied(stages[0]) is stages[0].embed_tokens.weight
        assert plan.tied(stages[2]) is stages[2].lm_head.weight
    else:
        assert stages[2].embed_tokens is None
        assert plan.tied(stages[0]) is None and plan.tied(stages[2]) is None


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"vocab_size": 0}, "vocab_size=0"),
        ({"n_kv_heads": 3}, "n_kv_heads=3"),
        ({"dim": 30}, "dim=30"),
    ],
)
def test_bad_settings_are_a_config_error_before_any_worker(change: dict, key: str) -> None:
    """The planner's shape is asked for on every run before its workers start."""
    with pytest.raises(ConfigError, match=rf"^model\.{key}"):
        LlamaParallelize().shape({**vars(CFG), **change}, seq_len=8)
