"""What every side of benchmarks/llm_throughput.py shares, and the torchtitan side itself.

Each side runs in a process of its own (so its peak RSS is its own) and reads one work folder
that llm_throughput.py prepared:

    plan.json        steps, warm-up, batch, sequence, precision, compile, optimizer settings
    tokens.npy       int64 [warmup + steps, batch, seq + 1]: the training batches, in order
    eval.npy         int64 [k, batch, seq + 1]: held-out batches for the loss after training
    hf/              config.json and model.safetensors: the initial weights, Hugging Face names

It prints its figures as one JSON object on its last line. This file imports only torch, numpy
and safetensors (and torchtitan for its own side), because torchtitan's side runs it in
torchtitan's environment, where xirang is not installed:

    <torchtitan venv>/bin/python benchmarks/llm_peer.py WORK
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

TORCHTITAN = "torchtitan==0.3.0"
#: its Llama 3 imports triton's language module at import time (MoE kernels), even on a CPU
TORCHTITAN_EXTRA = ("triton==3.9.0",)
PROFILE_STEPS = 3  # steps recorded by the profiler, after the warm-up


def load_plan(work: Path) -> dict[str, Any]:
    return json.loads((work / "plan.json").read_text())


def tokens(work: Path, name: str = "tokens") -> torch.Tensor:
    return torch.from_numpy(np.load(work / f"{name}.npy"))


class Stopwatch:
    """Wall time of every optimizer step, stamped when the step ends (CPU: no device sync)."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.stamps = [time.perf_counter()]
        self.profiler: Any = None

    def step_end(self) -> None:
        self.stamps.append(time.perf_counter())
        if self.profiler is not None:
            self.profiler.step()

    def figures(self, loss: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Warm-up (compile included) and the measured steps after it, loss, peak RSS;
        ``extra["loss_start"]``, the untrained model's loss on the first held-out batch, shows
        that every side starts from the same model."""
        warmup = self.plan["warmup"]
        steps = np.diff(self.stamps)
        return {
            "warmup_s": float(steps[:warmup].sum()),
            "step_s": steps[warmup:].tolist(),
            "loss": loss,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            **(extra or {}),
        }


@contextlib.contextmanager
def profiled(watch: Stopwatch, work: Path, side: str) -> Iterator[None]:
    """With ``plan.profile``, record PROFILE_STEPS steps after the warm-up and write the top
    operators by self CPU time to ``profile-<side>.txt``, and every operator's self CPU time
    (microseconds) to ``profile-<side>.json``: the shares of a step (matmuls, attention) that
    bound one side's speed against another's are sums over all of them."""
    if not watch.plan.get("profile"):
        yield
        return
    from torch.profiler import ProfilerActivity, profile, schedule

    def write(prof: Any) -> None:
        events = prof.key_averages()
        table = events.table(sort_by="self_cpu_time_total", row_limit=15)
        (work / f"profile-{side}.txt").write_text(table)
        self_us = {e.key: e.self_cpu_time_total for e in events if e.self_cpu_time_total > 0}
        (work / f"profile-{side}.json").write_text(json.dumps(self_us, indent=1))

    steps = schedule(
        skip_first=watch.plan["warmup"], wait=0, warmup=1, active=PROFILE_STEPS, repeat=1
    )
    with profile(activities=[ProfilerActivity.CPU], schedule=steps, on_trace_ready=write) as p:
        watch.profiler = p
        yield


def autocast(plan: dict[str, Any]) -> contextlib.AbstractContextManager:
    if plan["precision"] == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def eval_loss(logits_of: Callable[[torch.Tensor], torch.Tensor], batches: torch.Tensor) -> float:
    """Mean cross-entropy of the trained model on the held-out batches, in fp32: the same
    measure on every side, whatever each framework logs."""
    losses = []
    for batch in batches:
        logits = logits_of(batch[:, :-1]).float()
        losses.append(F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).item())
    return float(np.mean(losses))


def lr_factor(step: int, plan: dict[str, Any]) -> float:
    """The schedule every side uses, as a factor of the peak lr for a 0-based step: linear
    warm-up, then cosine decay to ``min_lr`` (what Hugging Face calls
    ``cosine_warmup_with_min_lr``)."""
    optim, total = plan["optim"], plan["warmup"] + plan["steps"]
    warmup, floor = optim["warmup_steps"], optim["min_lr"] / optim["lr"]
    if step < warmup:
        return (step + 1) / max(warmup, 1)
    progress = min((step + 1 - warmup) / max(total - warmup, 1), 1.0)
    return floor + 0.5 * (1 - floor) * (1 + math.cos(math.pi * progress))


def decay_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on matrices only, as xirang and Hugging Face's Trainer both group it."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


# --- torchtitan ------------------------------------------------------------------------------


def titan_model(hf: dict[str, Any]) -> tuple[torch.nn.Module, Any]:
    """torchtitan's Llama 3 in the shape of the Hugging Face config, with its SDPA attention:
    the language-model backends it offers (flex, varlen) have no backward on a CPU."""
    from torchtitan.models import llama3
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention

    dim, vocab, heads = hf["hidden_size"], hf["vocab_size"], hf["num_attention_heads"]
    eps = hf["rms_norm_eps"]
    theta = hf.get("rope_theta") or hf["rope_parameters"]["rope_theta"]  # transformers 4 or 5
    layers = llama3._build_llama3_layers(  # the builder its own flavours use
        n_layers=hf["num_hidden_layers"],
        dim=dim,
        n_heads=heads,
        n_kv_heads=hf["num_key_value_heads"],
        hidden_dim=hf["intermediate_size"],
        rope=ComplexRoPE.Config(
            dim=dim // heads, max_seq_len=hf["max_position_embeddings"], theta=theta
        ),
        attn_backend="flex",
    )
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
        layer.attention_norm.eps = layer.ffn_norm.eps = eps
    config = llama3.Llama3Model.Config(
        dim=dim,
        vocab_size=vocab,
        enable_weight_tying=hf.get("tie_word_embeddings", False),
        tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
        norm=RMSNorm.Config(normalized_shape=dim, eps=eps),
        lm_head=Linear.Config(in_features=dim, out_features=vocab),
        layers=layers,
    )
    model = config.build()
    model.init_states()
    return model, config


def titan_side(work: Path) -> dict[str, Any]:
    """torchtitan's Llama 3 in a plain loop, as its trainer runs one device: autocast for
    bf16, each transformer block and the loss compiled (its ``compile.components`` default,
    ``["model", "loss"]``), fused AdamW, foreach gradient clipping."""
    from safetensors.torch import load_file
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.models.llama3 import Llama3StateDictAdapter

    plan = load_plan(work)
    torch.set_num_threads(plan["threads"])
    hf = json.loads((work / "hf" / "config.json").read_text())
    model, config = titan_model(hf)
    state = Llama3StateDictAdapter(config, None).from_hf(load_file(work / "hf/model.safetensors"))
    model.load_state_dict(state)
    start = eval_loss(model, tokens(work, "eval")[:1])
    loss_fn = cross_entropy_loss
    if plan["compile"]:
        for block in model.layers.values():
            block.compile(fullgraph=True)
        loss_fn = torch.compile(cross_entropy_loss)
    optim = plan["optim"]
    opt = torch.optim.AdamW(
        decay_groups(model, optim["weight_decay"]),
        lr=optim["lr"],
        betas=(optim["beta1"], optim["beta2"]),
        fused=True,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, plan))
    batches, watch = tokens(work), Stopwatch(plan)
    model.train()
    with profiled(watch, work, "torchtitan"):
        for batch in batches:
            inputs, labels = batch[:, :-1], batch[:, 1:]
            with autocast(plan):
                pred = model(inputs)
            loss = loss_fn(pred, labels) / labels.numel()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), plan["grad_clip"], foreach=True)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            watch.step_end()
    model.eval()
    return watch.figures(eval_loss(model, tokens(work, "eval")), {"loss_start": start})


if __name__ == "__main__":
    print(json.dumps(titan_side(Path(sys.argv[1]))))
