"""The GPT family in Hugging Face's ``GPT2LMHeadModel`` layout, both ways.

GPT-2 keeps q, k and v in one ``c_attn`` projection and stores its linear layers as ``Conv1D``
(weights transposed: ``[in, out]``); it has biases where xirang's GPT has none (written as
zeros), exact GELU (``activation_function: gelu``, as ``F.gelu``), LayerNorm epsilon 1e-5, and
its head tied to the token embedding. Reading a GPT-2 directory back refuses what the GPT
cannot represent (non-zero biases, another activation) instead of dropping it silently.
"""

from __future__ import annotations

from typing import Any

import torch

from xirang.specs import HFInteropBase

#: GPT settings that fix the tensors' shapes, and their GPT-2 config keys
SHAPE_KEYS = {
    "n_layer": "n_layer",
    "n_head": "n_head",
    "n_embd": "n_embd",
    "max_seq_len": "n_positions",
    "vocab_size": "vocab_size",
}
#: xirang per-block name -> GPT-2 per-block name, for the tensors that only change names
SAME = {
    "ln1.weight": "ln_1.weight",
    "ln1.bias": "ln_1.bias",
    "ln2.weight": "ln_2.weight",
    "ln2.bias": "ln_2.bias",
}
#: xirang linear -> GPT-2 Conv1D (transposed, with a bias)
CONV = {"attn.proj": "attn.c_proj", "mlp.up": "mlp.c_fc", "mlp.down": "mlp.c_proj"}
LAYER_NORM_EPS = 1e-5


class GPTHF(HFInteropBase):
    """The GPT family's :class:`~xirang_core.specs.HFInterop`."""

    def to_hf(
        self, settings: dict[str, Any], state: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        h = settings["n_embd"]
        config = {
            "architectures": ["GPT2LMHeadModel"],
            "model_type": "gpt2",
            **{hf: settings[ours] for ours, hf in SHAPE_KEYS.items()},
            "n_ctx": settings["max_seq_len"],
            "n_inner": 4 * h,
            "activation_function": "gelu",
            "layer_norm_epsilon": LAYER_NORM_EPS,
            "resid_pdrop": 0.0,  # xirang's GPT drops out after the embeddings and in attention
            "embd_pdrop": settings.get("dropout", 0.0),
            "attn_pdrop": settings.get("dropout", 0.0),
            "scale_attn_weights": True,
            "tie_word_embeddings": True,
            "bos_token_id": None,
            "eos_token_id": None,
            "dtype": "float32",
        }
        # the tied weight goes by the embedding's name, or the head's where a stage has no other
        wte = state["tok_emb.weight"] if "tok_emb.weight" in state else state["head.weight"]
        out = {
            "transformer.wte.weight": wte,
            "transformer.wpe.weight": state["pos_emb.weight"],
            "transformer.ln_f.weight": state["ln_f.weight"],
            "transformer.ln_f.bias": state["ln_f.bias"],
        }
        for i in range(settings["n_layer"]):
            ours, hf = f"blocks.{i}.", f"transformer.h.{i}."
            out |= {hf + theirs: state[ours + mine] for mine, theirs in SAME.items()}
            qkv = torch.cat([state[f"{ours}attn.{p}.weight"] for p in "qkv"])
            out |= _conv1d(hf + "attn.c_attn", qkv)
            for mine, theirs in CONV.items():
                out |= _conv1d(hf + theirs, state[f"{ours}{mine}.weight"])
        return config, {k: v.contiguous() for k, v in out.items()}

    def from_hf(
        self, hf_config: dict[str, Any], tensors: dict[str, torch.Tensor]
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        _check_config(hf_config)
        settings = {ours: hf_config[hf] for ours, hf in SHAPE_KEYS.items()}
        wte = tensors["transformer.wte.weight"]
        state = {
            "tok_emb.weight": wte,
            "pos_emb.weight": tensors["transformer.wpe.weight"],
            "ln_f.weight": tensors["transformer.ln_f.weight"],
            "ln_f.bias": tensors["transformer.ln_f.bias"],
        }
        head = tensors.get("lm_head.weight")
        if head is not None and not head.is_meta and not torch.equal(head, wte):
            raise ValueError("lm_head.weight differs from transformer.wte.weight (the GPT ties)")
        for i in range(settings["n_layer"]):
            ours, hf = f"blocks.{i}.", f"transformer.h.{i}."
            state |= {ours + mine: tensors[hf + theirs] for mine, theirs in SAME.items()}
            q, k, v = _linear(tensors, hf + "attn.c_attn").chunk(3)
            state |= {f"{ours}attn.q.weight": q, f"{ours}attn.k.weight": k}
            state[f"{ours}attn.v.weight"] = v
            for mine, theirs in CONV.items():
                state[f"{ours}{mine}.weight"] = _linear(tensors, hf + theirs)
        return settings, {k: v.contiguous() for k, v in state.items()}


def _conv1d(name: str, weight: torch.Tensor) -> dict[str, torch.Tensor]:
    """A linear layer's ``[out, in]`` weight as a GPT-2 Conv1D: ``[in, out]`` and a zero bias."""
    return {f"{name}.weight": weight.t(), f"{name}.bias": weight.new_zeros(weight.shape[0])}


def _linear(tensors: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """A GPT-2 Conv1D as a bias-free linear weight; refuses a bias the GPT would lose."""
    bias = tensors[f"{name}.bias"]
    if not bias.is_meta and bool(bias.any()):
        raise ValueError(f"{name}.bias is not zero (xirang's GPT has no biases in its linears)")
    return tensors[f"{name}.weight"].t()


def _check_config(hf_config: dict[str, Any]) -> None:
    """What the GPT computes differently from GPT-2 defaults is refused by name."""
    # (key, GPT-2's default when the file leaves it out, what the GPT computes)
    expected = [
        ("model_type", None, "gpt2"),
        ("activation_function", "gelu_new", "gelu"),
        ("layer_norm_epsilon", LAYER_NORM_EPS, LAYER_NORM_EPS),
    ]
    for key, default, value in expected:
        found = hf_config.get(key, default)
        if found != value:
            raise ValueError(f"config.json has {key}={found!r}; the GPT needs {value!r}")
    inner = hf_config.get("n_inner")
    if inner not in (None, 4 * hf_config["n_embd"]):
        raise ValueError(f"config.json has n_inner={inner}; the GPT's MLP is 4 x n_embd wide")
    if not hf_config.get("tie_word_embeddings", True):
        raise ValueError("config.json has tie_word_embeddings=false; the GPT ties its head")
