"""The Llama family in torchtitan's layout (its ``Llama3Model``): names and row order.

torchtitan names a Llama's tensors ``tok_embeddings``, ``layers.<i>.attention.qkv_linear.wq``
(``wk``, ``wv``; one fused ``wqkv`` where its optimizer keys the fused parameter),
``attention.wo``, ``feed_forward.w1/w2/w3``, ``attention_norm``, ``ffn_norm``, ``norm`` and
``lm_head`` (``output`` before 0.3). Its RoPE rotates adjacent pairs of a head (complex
numbers), where xirang's rotates the two halves, so the rows of q and k are permuted per head,
as torchtitan's own Hugging Face adapter (``Llama3StateDictAdapter``) does. The fused ``wqkv``
stacks, per key/value head, its query heads, its key and its value (``FusedQKVLinear``).

A mapping takes any per-parameter tensors keyed by parameter name: weights, or an optimizer's
moments (shaped as the weight, moved the same way) and 0-d values (Adam's ``step``), which are
renamed and never permuted.
"""

from __future__ import annotations

import re

import torch

from xirang import ConfigError
from xirang_llama.config import LlamaConfig

#: torchtitan's name of each xirang name, ``{}`` standing for the layer index
_NAMES = {
    "embed_tokens.weight": "tok_embeddings.weight",
    "layers.{}.self_attn.q_proj.weight": "layers.{}.attention.qkv_linear.wq.weight",
    "layers.{}.self_attn.k_proj.weight": "layers.{}.attention.qkv_linear.wk.weight",
    "layers.{}.self_attn.v_proj.weight": "layers.{}.attention.qkv_linear.wv.weight",
    "layers.{}.self_attn.o_proj.weight": "layers.{}.attention.wo.weight",
    "layers.{}.mlp.gate_proj.weight": "layers.{}.feed_forward.w1.weight",
    "layers.{}.mlp.up_proj.weight": "layers.{}.feed_forward.w3.weight",
    "layers.{}.mlp.down_proj.weight": "layers.{}.feed_forward.w2.weight",
    "layers.{}.input_layernorm.weight": "layers.{}.attention_norm.weight",
    "layers.{}.post_attention_layernorm.weight": "layers.{}.ffn_norm.weight",
    "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}
_FROM_TITAN = {titan: ours for ours, titan in _NAMES.items()}
_FROM_TITAN["output.weight"] = "lm_head.weight"  # torchtitan before 0.3
_FUSED = "layers.{}.attention.qkv_linear.wqkv.weight"
_LAYER = re.compile(r"^layers\.(\d+)\.")


def _pattern(name: str) -> tuple[str, str]:
    """``(name with its layer index as {}, the index)``; no index: ``(name, "")``."""
    found = _LAYER.match(name)
    if found is None:
        return name, ""
    return _LAYER.sub("layers.{}.", name, count=1), found.group(1)


def _to_halves(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of each head from adjacent pairs (torchtitan) to two halves (xirang)."""
    rows, cols = w.shape
    return w.view(heads, rows // heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _to_pairs(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Rows of each head from two halves (xirang) to adjacent pairs (torchtitan)."""
    rows, cols = w.shape
    return w.view(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def _heads(cfg: LlamaConfig, pattern: str) -> int:
    """How many heads a q or k projection holds (0: not one whose rows RoPE rotates)."""
    if pattern.endswith(("q_proj.weight", "wq.weight")):
        return cfg.n_heads
    if pattern.endswith(("k_proj.weight", "wk.weight")):
        return cfg.n_kv_heads
    return 0


def _split_fused(cfg: LlamaConfig, layer: str, value: torch.Tensor) -> dict[str, torch.Tensor]:
    """A fused ``wqkv`` as torchtitan's ``wq``, ``wk`` and ``wv`` (a 0-d value: to each)."""
    names = [f"layers.{layer}.attention.qkv_linear.{w}.weight" for w in ("wq", "wk", "wv")]
    if value.dim() == 0:
        return dict.fromkeys(names, value)
    per_kv = cfg.n_heads // cfg.n_kv_heads
    rows = cfg.n_kv_heads * (per_kv + 2) * cfg.head_dim
    if value.shape[0] != rows:
        raise ConfigError(
            f"{_FUSED.format(layer)}: {value.shape[0]} rows, where n_heads={cfg.n_heads}, "
            f"n_kv_heads={cfg.n_kv_heads} and head_dim={cfg.head_dim} make {rows}"
        )
    w = value.reshape(cfg.n_kv_heads, per_kv + 2, cfg.head_dim, -1)
    parts = (w[:, :per_kv], w[:, per_kv], w[:, per_kv + 1])
    return {n: p.reshape(-1, value.shape[-1]) for n, p in zip(names, parts, strict=True)}


def from_torchtitan(
    cfg: LlamaConfig, tensors: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """xirang's tensors from torchtitan's, and the names no mapping knows (left out)."""
    unfused: dict[str, torch.Tensor] = {}
    for name, value in tensors.items():
        pattern, layer = _pattern(name)
        unfused.update(_split_fused(cfg, layer, value) if pattern == _FUSED else {name: value})
    out: dict[str, torch.Tensor] = {}
    unknown: list[str] = []
    for name, value in unfused.items():
        pattern, layer = _pattern(name)
        ours = _FROM_TITAN.get(pattern)
        if ours is None:
            unknown.append(name)
            continue
        heads = _heads(cfg, pattern)
        out[ours.format(layer)] = _to_halves(value, heads) if heads and value.dim() else value
    return out, unknown


def to_torchtitan(
    cfg: LlamaConfig, tensors: dict[str, torch.Tensor], fused: bool
) -> dict[str, torch.Tensor]:
    """torchtitan's tensors from xirang's; ``fused``: q, k and v as one ``wqkv`` per layer
    (how its optimizer keys them), else as its model's ``state_dict`` gives them."""
    out: dict[str, torch.Tensor] = {}
    for name, value in tensors.items():
        pattern, layer = _pattern(name)
        titan = _NAMES.get(pattern)
        if titan is None:
            raise ConfigError(f"{name}: no torchtitan Llama 3 parameter takes it")
        heads = _heads(cfg, pattern)
        out[titan.format(layer)] = _to_pairs(value, heads) if heads and value.dim() else value
    return _fuse(cfg, out) if fused else out


def _fuse(cfg: LlamaConfig, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each layer's ``wq``, ``wk`` and ``wv`` as torchtitan's fused ``wqkv``."""
    out = dict(tensors)
    per_kv = cfg.n_heads // cfg.n_kv_heads
    for layer in range(cfg.n_layers):
        keys = [f"layers.{layer}.attention.qkv_linear.{w}.weight" for w in ("wq", "wk", "wv")]
        if not all(k in out for k in keys):
            continue
        q, k, v = (out.pop(key) for key in keys)
        if q.dim() == 0:
            out[_FUSED.format(layer)] = q
            continue
        cols = q.shape[-1]
        parts = (
            q.reshape(cfg.n_kv_heads, per_kv, cfg.head_dim, cols),
            k.reshape(cfg.n_kv_heads, 1, cfg.head_dim, cols),
            v.reshape(cfg.n_kv_heads, 1, cfg.head_dim, cols),
        )
        out[_FUSED.format(layer)] = torch.cat(parts, dim=1).reshape(-1, cols)
    return out
