"""torchtitan 0.3.0's own Llama 3 and ``CheckpointManager``, driven as its trainer drives them.

Run with the test-built torchtitan install on ``PYTHONPATH`` (tests/checkpoint/titan.py):

    python titan_driver.py save ROOT STEPS     train STEPS steps, save as torchtitan does
    python titan_driver.py load FOLDER OUT     load FOLDER (initial_load_path), write logits
    python titan_driver.py full FOLDER OUT     the same with the optimizer (model_only off)

The model: torchtitan's ``Llama3Model`` with its fused ``wqkv``, built by its own layer
builder at tiny dims (``DIMS``), attention by its causal SDPA inner attention. The optimizer:
its ``default_adamw`` container. ``logits.pt`` beside a save holds the logits of ``TOKENS``,
``optim.pt`` its optimizer's (flattened) state dict; ``full`` writes ``OUT`` and ``OUT.optim``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

DIMS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 96, "vocab": 97}
THETA = 10000.0
SEQ = 16
TOKENS = torch.arange(2 * SEQ).reshape(2, SEQ) % DIMS["vocab"]


def build_model(seed: int) -> torch.nn.Module:
    """torchtitan's Llama 3 at ``DIMS``, initialised by its own ``init_states``."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import _build_llama3_layers
    from torchtitan.models.llama3.model import Llama3Model

    d = DIMS
    layers = _build_llama3_layers(
        n_layers=d["n_layers"],
        dim=d["dim"],
        n_heads=d["n_heads"],
        n_kv_heads=d["n_kv_heads"],
        hidden_dim=d["ffn_dim"],
        rope=ComplexRoPE.Config(
            dim=d["dim"] // d["n_heads"], max_seq_len=64, theta=THETA, scaling="none"
        ),
        fuse_qkv=True,
        attn_backend="flex",
    )
    for layer in layers:  # its causal SDPA: positions are never packed here
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    config = Llama3Model.Config(
        dim=d["dim"],
        vocab_size=d["vocab"],
        tok_embeddings=Embedding.Config(num_embeddings=d["vocab"], embedding_dim=d["dim"]),
        norm=RMSNorm.Config(normalized_shape=d["dim"]),
        lm_head=Linear.Config(in_features=d["dim"], out_features=d["vocab"]),
        layers=layers,
    )
    torch.manual_seed(seed)
    model = config.build()
    model.init_states()
    return model


def parts(model: torch.nn.Module, steps: int) -> tuple:
    """torchtitan's optimizer and schedule containers over ``model``."""
    from torchtitan.components.optimizer import default_adamw
    from torchtitan.components.optimizer.lr_scheduler import LRSchedulersContainer

    optim_config = default_adamw(lr=1e-3)
    optim_config.implementation = "for-loop"
    optimizers = optim_config.build(model_parts=[model])
    schedules = LRSchedulersContainer.Config(warmup_steps=1).build(
        optimizers=optimizers, training_steps=max(steps, 2)
    )
    return optimizers, schedules


class TrainState:
    """The ``train_state`` torchtitan's trainer saves (its step and tokens seen)."""

    def __init__(self) -> None:
        self.step, self.ntokens_seen = 0, 0

    def state_dict(self) -> dict:
        return {"step": self.step, "ntokens_seen": self.ntokens_seen}

    def load_state_dict(self, state: dict) -> None:
        self.step, self.ntokens_seen = state["step"], state["ntokens_seen"]


def manager(model, optimizers, schedules, state: TrainState, **settings):
    from torchtitan.components.checkpoint import CheckpointManager

    config = CheckpointManager.Config(enable=True, **settings)
    return CheckpointManager(
        config,
        dataloader=None,
        model_parts=[model],
        optimizers=optimizers,
        lr_schedulers=schedules,
        states={"train_state": state},
        sd_adapter=None,
    )


def save(root: Path, steps: int) -> None:
    model = build_model(seed=0)
    optimizers, schedules = parts(model, steps)
    state = TrainState()
    saver = manager(
        model, optimizers, schedules, state, folder=str(root), interval=steps,
        last_save_model_only=False,
    )  # fmt: skip
    for step in range(1, steps + 1):
        state.step = step
        logits = model(TOKENS)
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), TOKENS[:, 1:].flatten()
        )
        loss.backward()
        optimizers.step()
        optimizers.zero_grad()
        schedules.step()
        state.ntokens_seen += TOKENS.numel()
        saver.save(step, last_step=step == steps)
    saver.close()
    with torch.no_grad():
        torch.save(model(TOKENS), root / "logits.pt")
    torch.save(optimizers.state_dict(), root / "optim.pt")


def load(folder: Path, out: Path, full: bool) -> None:
    """``full``: the optimizer too (its schedule and data loader are not in the folder)."""
    model = build_model(seed=1)
    optimizers, schedules = parts(model, 2)
    loader = manager(
        model, optimizers, schedules, TrainState(), folder=str(out.parent / "unused"),
        initial_load_path=str(folder), initial_load_model_only=not full,
        exclude_from_loading=["lr_scheduler", "dataloader"] if full else [],
    )  # fmt: skip
    assert loader.load(), f"torchtitan loaded nothing from {folder}"
    with torch.no_grad():
        torch.save(model(TOKENS), out)
    if full:
        torch.save(optimizers.state_dict(), out.with_suffix(".optim"))


if __name__ == "__main__":
    action, where, more = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    save(where, int(more)) if action == "save" else load(where, Path(more), action == "full")
