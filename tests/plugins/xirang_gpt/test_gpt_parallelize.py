"""The GPT family's split plan: shape for the planner, pipeline stages that chain exactly."""

from __future__ import annotations

import copy

import torch
from xirang_gpt.model import GPT, GPTConfig
from xirang_gpt.parallelize import GPTParallelize

CFG = GPTConfig(n_layer=3, n_head=2, n_embd=16, max_seq_len=8, vocab_size=32)


def test_shape_counts_every_parameter() -> None:
    model = GPT(CFG)
    shape = GPTParallelize().shape(vars(CFG), seq_len=8)
    assert shape.params == model.num_params(non_embedding=False)
    assert (shape.layers, shape.hidden, shape.heads, shape.vocab) == (3, 16, 2, 32)


def test_stages_chain_to_the_whole_model() -> None:
    """Cut into 2 stages, the stages' forwards in sequence give the unsplit logits, and each
    stage keeps the whole model's parameter names (checkpoints line up)."""
    torch.manual_seed(0)
    whole = GPT(CFG)
    plan = GPTParallelize()
    stages = [copy.deepcopy(whole) for _ in range(2)]
    ranges = [plan.split_stage(m, i, 2) for i, m in enumerate(stages)]
    assert ranges == [(0, 1), (1, 3)]
    x = torch.randint(0, CFG.vocab_size, (2, 8))
    assert torch.allclose(stages[1](stages[0](x)), whole(x), atol=1e-6)
    names = set(dict(whole.named_parameters()))
    for stage in stages:
        assert set(dict(stage.named_parameters())) <= names
    assert plan.tied(stages[0]) is stages[0].tok_emb.weight
    assert plan.tied(stages[1]) is stages[1].head.weight  # the head's copy of the tied weight


def test_a_later_stage_counts_its_own_parameters() -> None:
    """A stage after the first has no position embeddings to leave out: it counts what it
    holds (the count read an embedding the split had dropped)."""
    stage = GPT(CFG)
    GPTParallelize().split_stage(stage, 1, 2)
    held = sum(p.numel() for p in stage.parameters())
    assert stage.num_params() == stage.num_params(non_embedding=False) == held
