"""torchtitan's FSDP2 unit layout and tensor-parallel plan for the Llama, on two gloo workers:
embeddings and head are FSDP units of their own; under tensor parallel the embedding table
and the head are split over the vocabulary and the loss is vocabulary-parallel; every split
gives the unsplit model's loss and gradients."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from split_workers import SEED, split_steps, started_weights, whole_step
from xirang_llama.model import Llama, LlamaConfig

from xirang.comm.launch import run_group
from xirang_core.parallel.plan import ParallelPlan
from xirang_core.train.init import full_parameter, model_name


def config(tied: bool) -> LlamaConfig:
    return LlamaConfig(
        dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=40,
        tie_embeddings=tied,
    )  # fmt: skip


CASES = {
    "fsdp": (config(False), ParallelPlan(dp=2, zero=3)),
    "fsdp tied": (config(True), ParallelPlan(dp=2, zero=3)),
    "tp": (config(False), ParallelPlan(tp=2)),
    "sp tied": (config(True), ParallelPlan(tp=2, sp=True)),
}


@pytest.fixture(scope="module")
def split() -> dict[str, Any]:
    ranks = run_group(split_steps, 2, list(CASES.values()))
    return dict(zip(CASES, zip(*ranks, strict=True), strict=True))


@pytest.mark.parametrize("name", CASES)
def test_loss_and_gradients_equal_the_unsplit_model(name: str, split: dict) -> None:
    expected = whole_step(CASES[name][0])
    for rank in split[name]:
        torch.testing.assert_close(rank["loss"], expected["loss"], rtol=1e-6, atol=1e-6)
        assert rank["grads"].keys() == expected["grads"].keys()
        for param, grad in expected["grads"].items():
            torch.testing.assert_close(rank["grads"][param], grad, rtol=1e-5, atol=1e-6)


def test_fsdp_embeddings_and_head_are_units_of_their_own(split: dict) -> None:
    layout = split["fsdp"][0]["layout"]
    assert layout["units"] == ["", "embed_tokens", "layers.0", "layers.1", "lm_head", "norm"]
    assert layout["root_params"] == []  # nothing left gathered in the root all step
    tied = split["fsdp tied"][0]["layout"]
    assert tied["tied"] and tied["root_params"] == []
    assert {"embed_tokens", "lm_head", "norm"} <= set(tied["units"])


def test_tensor_parallel_splits_embeddings_and_head_over_the_vocabulary(split: dict) -> None:
    for name in ("tp", "sp tied"):
        layout = split[name][0]["layout"]
        assert layout["embed"] == "(Shard(dim=0),)"
        assert layout["head"] == "(Shard(dim=0),)"
    assert split["sp tied"][0]["layout"]["tied"]


def assert_started_as_built_whole(weights: dict[str, torch.Tensor], cfg: LlamaConfig) -> None:
    """Every gathered parameter equals the model built whole, and its serial draw."""
    torch.manual_seed(SEED)
    whole = Llama(cfg)
    expected = {model_name(n): p for n, p in whole.named_parameters()}
    assert weights.keys() == expected.keys()
    for name, value in weights.items():
        assert torch.equal(value, expected[name]), name
        assert torch.equal(value, full_parameter(whole, name, value, SEED)), name


def test_sharded_start_draws_the_weights_of_the_whole_model() -> None:
    """Built on meta, split (FSDP2 units, vocabulary-split TP) and materialised from the
    shards each rank cuts on the CPU: the gathered weights are the whole model's, bit for
    bit, on every rank."""
    ranks = run_group(started_weights, 2, list(CASES.values()))
    for rank in ranks:
        for (cfg, _), weights in zip(CASES.values(), rank, strict=True):
            assert_started_as_built_whole(weights, cfg)


@pytest.mark.slow
def test_sharded_start_over_fsdp_and_tensor_parallel_at_once() -> None:
    """dp2 x tp2: FSDP2 shards tensor parallel's shards (``_StridedShard``), and each rank's
    cut of the serial draw still gathers to the whole model's weights."""
    cases = [(config(False), ParallelPlan(dp=2, tp=2, zero=3))]
    (weights,) = run_group(started_weights, 4, cases)[0]
    assert_started_as_built_whole(weights, cases[0][0])
