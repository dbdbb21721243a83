"""benchmarks/llm_throughput.py compares like with like: every side follows xirang's learning
rate schedule step for step, and Hugging Face's side trains on the targets of every position."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from xirang_optim.schedules import WarmupCosine

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
import llm_peer
import llm_throughput

schedules = st.fixed_dictionaries(
    {
        "lr": st.floats(1e-4, 1e-2),
        "floor": st.floats(0.0, 0.5),
        "warmup_steps": st.integers(1, 10),
        "total": st.integers(2, 40),
    }
)


def plan_of(case: dict) -> dict:
    optim = {
        "lr": case["lr"],
        "min_lr": case["lr"] * case["floor"],
        "warmup_steps": case["warmup_steps"],
    }
    return {"optim": optim, "warmup": 1, "steps": case["total"] - 1}


@settings(max_examples=60, deadline=None)
@given(schedules)
def test_peer_schedule_is_xirangs(case: dict) -> None:
    """torchtitan's loop steps LambdaLR(lr_factor): the lr of each step is xirang's."""
    plan = plan_of(case)
    for step in range(1, case["total"] + 1):
        ours = WarmupCosine().lr(step, case["total"], plan["optim"])
        assert case["lr"] * llm_peer.lr_factor(step - 1, plan) == pytest.approx(ours, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(schedules)
def test_hf_scheduler_is_xirangs(case: dict) -> None:
    """The Trainer's ``cosine_warmup_with_min_lr`` as the HF side configures it."""
    from transformers import get_scheduler

    optim = plan_of(case)["optim"]
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=optim["lr"])
    sched = get_scheduler(
        "cosine_warmup_with_min_lr",
        opt,
        num_warmup_steps=optim["warmup_steps"],
        num_training_steps=case["total"],
        scheduler_specific_kwargs={"min_lr": optim["min_lr"]},
    )
    for step in range(1, case["total"] + 1):
        assert opt.param_groups[0]["lr"] == pytest.approx(
            WarmupCosine().lr(step, case["total"], optim)
        )
        opt.step()
        sched.step()


def test_hf_rows_train_on_every_position(tmp_path: Path) -> None:
    """The Dataset's rows, collated as the Trainer does, give LlamaForCausalLM the mean loss
    over all seq positions, the loss xirang and torchtitan compute."""
    from transformers import LlamaConfig, LlamaForCausalLM, default_data_collator

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=50,
        max_position_embeddings=16,
    )
    model = LlamaForCausalLM(cfg).eval()
    packed = np.random.default_rng(0).integers(0, 50, size=(2, 3, 17))  # [steps, batch, seq+1]
    np.save(tmp_path / "tokens.npy", packed)
    rows = list(llm_throughput.Rows(tmp_path))
    assert len(rows) == 6
    batch = default_data_collator(rows[:3])
    with torch.no_grad():
        loss = model(**batch).loss
        logits = model(input_ids=batch["input_ids"]).logits
    first = torch.from_numpy(packed[0])
    assert torch.equal(batch["input_ids"], first[:, :-1])
    expected = F.cross_entropy(logits.flatten(0, 1), first[:, 1:].flatten())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def _side(name: str, tokens_per_s: list[float], loss: float) -> llm_throughput.Side:
    side = llm_throughput.Side(name, ["python"])
    side.runs = [
        {"step_s": [1024 / t], "warmup_s": 1.0, "peak_rss_mb": 1.0, "loss": loss, "loss_start": 6}
        for t in tokens_per_s
    ]
    return side


def test_last_line_pairs_sides_within_rounds() -> None:
    """A round where the machine was busy for everyone does not decide the ratio; a peer
    that could not run is n/a, with the reason kept."""
    plan = {"batch": 2, "seq": 512}
    titan = llm_throughput.Side("torchtitan", None, "pip install failed")
    sides = [_side("xirang", [100, 400, 410], 4.25), _side("hf", [50, 400, 400], 4.2), titan]
    assert llm_throughput.last_line(sides, plan) == (
        "tokens_per_s_vs_hf=1.025 tokens_per_s_vs_torchtitan=n/a loss_vs_hf=0.0500"
    )


def test_precision_is_the_faster_one() -> None:
    """bf16 only where the CPU computes it faster than fp32 (this CPU's calibration: 70x
    slower without AVX-512 BF16 or AMX); fp32 on a tie or without a bf16 figure."""
    assert llm_throughput.faster_precision({"float32": 0.0425, "bfloat16": 0.0006}) == "fp32"
    assert llm_throughput.faster_precision({"float32": 0.9, "bfloat16": 3.1}) == "bf16"
    assert llm_throughput.faster_precision({"float32": 0.5, "bfloat16": 0.5}) == "fp32"
    assert llm_throughput.faster_precision({"float32": 0.5}) == "fp32"
