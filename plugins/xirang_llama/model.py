"""Llama 3 in one file: RoPE, RMSNorm, SwiGLU, grouped-query attention, optional tied embeddings.

Parameter names are Hugging Face ``LlamaForCausalLM``'s without its ``model.`` prefix, and RoPE
rotates the two halves of each head (Hugging Face's layout), so export is a rename. The layers
live in a dict keyed by index: a pipeline stage drops the ones it does not run and the others
keep their names. Initialisation follows torchtitan's Llama 3, drawn per parameter name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.nn import functional as F

from xirang.lora import inject
from xirang.model import document_mask, init_parameters, sample
from xirang.specs import ModelBase
from xirang_llama.config import LORA_TARGETS, LlamaConfig


def rope_tables(
    seq_len: int,
    head_dim: int,
    theta: float,
    device: torch.device | str,
    scaling: dict[str, Any] | None = None,
) -> tuple:
    """cos and sin ``[seq, head_dim]`` of each position's rotation, both halves of a head
    repeating the same frequencies (Hugging Face's layout), in fp32; ``scaling`` as
    :attr:`LlamaConfig.rope_scaling`."""
    inv_freq = 1.0 / theta ** (
        torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float() / head_dim
    )
    if scaling:
        inv_freq = llama3_frequencies(inv_freq, scaling)
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def llama3_frequencies(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    """Llama 3.1's long-context RoPE, as transformers computes it: wavelengths longer than the
    original context / low_freq_factor slow down by ``factor``, those shorter than the context /
    high_freq_factor stay, and the band between blends the two."""
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    context = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, scaled)


def project(x: torch.Tensor, *projections: nn.Linear) -> tuple[torch.Tensor, ...]:
    """``p(x)`` for each bias-free projection, computed as one matmul against the weights
    stacked: one larger matmul runs faster than three narrow ones on the CPU (q, k, v and
    gate, up; measured: about 7% of a step of the 29M-parameter Llama in bf16, compiled),
    as torchtitan's fused ``wqkv`` does, while parameters and names stay Hugging Face's.
    Tensor-parallel shards (DTensors, whose layout the modules' hooks convert) and layers
    with LoRA adapters (not plain ``nn.Linear``: their output adds the adapter's) go through
    the modules as they are."""
    weights = [p.weight for p in projections]
    plain = all(type(p) is nn.Linear for p in projections)
    if not plain or any(isinstance(w, DTensor) for w in weights):
        return tuple(p(x) for p in projections)
    return F.linear(x, torch.cat(weights)).split([w.shape[0] for w in weights], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[batch, seq, heads, head_dim]``: the first half of each head pairs with
    the second (``rotate_half``)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    cos, sin = cos[..., None, :].to(x.dtype), sin[..., None, :].to(x.dtype)
    return x * cos + rotated * sin


def takes_grouped_heads(device: torch.device, dtype: torch.dtype, masked: bool) -> bool:
    """Whether ``scaled_dot_product_attention``'s fast kernel for these inputs takes fewer
    key/value heads than query heads (``enable_gqa``). With ``enable_gqa`` on CUDA only the
    flash and cuDNN kernels run (fp16/bf16; flash takes no mask), and anything else (fp32,
    the default precision; a document mask) falls to the math kernel, which materialises
    the whole score matrix (torch's ``scaled_dot_product_attention`` notes; ``sdp_utils.cpp``).
    The CPU's flash kernel takes grouped heads in every dtype, with or without a mask.
    Other devices (ROCm, Ascend) are not assumed to: their heads are expanded."""
    if device.type == "cpu":
        return True
    if device.type == "cuda" and torch.version.hip is None:
        return dtype in (torch.float16, torch.bfloat16) and not masked
    return False


def repeat_kv(t: torch.Tensor, n_rep: int) -> torch.Tensor:
    """Each key/value head of ``t`` (``[batch, heads, seq, head_dim]``) repeated ``n_rep`` times
    in place, the layout ``enable_gqa`` reads (query head ``i`` uses key head ``i // n_rep``);
    torchtitan's ``repeat_kv``."""
    if n_rep == 1:
        return t
    batch, heads, seq, dim = t.shape
    return t[:, :, None].expand(batch, heads, n_rep, seq, dim).reshape(batch, -1, seq, dim)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """Scaled dot-product attention, causal or within ``mask``, with grouped key/value heads
    handed to the kernel as they are where it takes them (:func:`takes_grouped_heads`) and
    expanded to one per query head elsewhere, so the flash, cuDNN or memory-efficient kernel
    runs rather than the math one."""
    n_rep = q.shape[1] // k.shape[1]
    grouped = n_rep > 1 and takes_grouped_heads(q.device, q.dtype, mask is not None)
    if not grouped:
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=mask is None, enable_gqa=grouped
    )


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.head_dim, self.theta = cfg.head_dim, cfg.rope_theta
        self.rope_scaling = cfg.rope_scaling
        kv_width = cfg.n_kv_heads * cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, kv_width, bias=False)
        self.v_proj = nn.Linear(cfg.dim, kv_width, bias=False)
        self.o_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        *,
        rope: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Causal attention, or with ``mask`` (``[batch, 1, seq, seq]``) only where it is true,
        RoPE then rotating by ``positions`` (``[batch, seq]``) instead of the index. ``rope``
        is the model's one cos/sin table (:meth:`Llama.init_buffers`); a layer run alone (the
        planner's probes) computes the rotation here."""
        batch, seq = x.shape[:2]
        # heads are counted from the projections' widths: under tensor parallel a worker holds
        # only its share of the query and of the key/value heads
        q, k, v = (
            t.view(batch, seq, -1, self.head_dim)
            for t in project(x, self.q_proj, self.k_proj, self.v_proj)
        )
        if rope is not None and seq <= rope.shape[1]:
            cos, sin = rope[:, :seq]
        else:  # no table, or longer than max_seq_len: the same rotation, computed here
            cos, sin = rope_tables(seq, self.head_dim, self.theta, x.device, self.rope_scaling)
        if positions is not None:
            cos, sin = cos[positions], sin[positions]
        # rotated in the [batch, seq, heads, dim] layout, so attention's output comes back in it
        # and the reshape for o_proj is a view, not a copy
        q, k, v = (t.transpose(1, 2) for t in (apply_rope(q, cos, sin), apply_rope(k, cos, sin), v))
        y = attend(q, k, v, mask)
        return self.o_proj(y.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = project(x, self.gate_proj, self.up_proj)
        return self.down_proj(F.silu(gate) * up)


class Layer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self, x: torch.Tensor, *documents: torch.Tensor, rope: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``documents``: (positions, mask) of a document-masked batch, or nothing; ``rope``
        (a keyword, so tensor parallel's input layouts see only ``x``): the cos/sin table."""
        x = x + self.self_attn(self.input_layernorm(x), *documents, rope=rope)
        return x + self.mlp(self.post_attention_layernorm(x))


class VocabParallelLoss(torch.autograd.Function):
    """Mean cross-entropy of logits sharded over the vocabulary (``Shard(-1)``), forward and
    backward under torch's ``loss_parallel``: each rank reduces its share of the softmax, and
    the whole-vocabulary logits are never gathered (torchtitan's TP plan). The context must
    hold in backward too, and the training loop runs ``loss.backward()`` outside the model,
    so backward enters it here. The loss comes back as a plain (replicated) tensor."""

    @staticmethod
    def forward(ctx: Any, logits: DTensor, targets: torch.Tensor) -> torch.Tensor:
        from torch.distributed.tensor.parallel import loss_parallel

        with torch.enable_grad(), loss_parallel():
            inner = logits.detach().requires_grad_()
            loss = F.cross_entropy(inner.flatten(0, -2), targets.reshape(-1))
        ctx.inner, ctx.loss = inner, loss
        assert isinstance(loss, DTensor)  # the loss of sharded logits, under loss_parallel
        return loss.to_local()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        from torch.distributed.tensor.parallel import loss_parallel

        grad = DTensor.from_local(grad, ctx.loss.device_mesh, ctx.loss.placements)
        with loss_parallel():
            (logits_grad,) = torch.autograd.grad(ctx.loss, ctx.inner, grad)
        return logits_grad, None


#: torchtitan's depth-scaled projections (its wo, w2 and w3): std 0.02 / sqrt(2 (layer + 1));
#: searched, not matched, so wrapper prefixes (recompute, compile) in a name do not matter
_DEPTH_SCALED = re.compile(r"layers\.(\d+)\..*(o_proj|down_proj|up_proj)\.weight$")


class Llama(nn.Module, ModelBase):
    #: ``forward`` takes document indices (``data.document_mask=true``)
    document_mask = True
    #: tensor parallel may split the vocabulary (embeddings, head, loss); a pipeline stage's
    #: split turns it off (:meth:`LlamaParallelize.split_stage`)
    vocab_parallel = True
    #: the parts a pipeline stage may drop (:meth:`LlamaParallelize.split_stage`)
    embed_tokens: nn.Embedding | None
    norm: nn.RMSNorm | None
    lm_head: nn.Linear | None
    #: cos and sin of each position (:meth:`init_buffers`)
    rope: torch.Tensor
    #: the final norm, output head and loss (:meth:`eager_head_loss`); a split plan may put
    #: its compiled graph here (:meth:`LlamaParallelize.compile_head`)
    head_loss: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        cfg.check()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): Layer(cfg) for i in range(cfg.n_layers)})
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.register_buffer(
            "rope", torch.empty(2, cfg.max_seq_len, cfg.head_dim), persistent=False
        )
        self.head_loss = self.eager_head_loss
        init_parameters(self)
        self.init_buffers()

    def after_weights(self) -> None:
        """``model.lora_rank``: LoRA adapters into the (pretrained, now loaded) weights, which
        freeze; the model keeps its class, so the loop, generation and export see a Llama."""
        if self.cfg.lora_rank:
            inject(self, asdict(self.cfg), LORA_TARGETS)

    @classmethod
    def from_config(cls, settings: dict) -> Llama:
        return cls(LlamaConfig(**settings))

    def param_init(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        """torchtitan's Llama 3 init: token embeddings N(0, 1); q, k, v and gate projections
        truncated normal with std 0.02; o, down and up projections std 0.02 / sqrt(2 (l + 1))
        for layer l; the output head std dim^-1/2 cut at 3 std; norms one. torchtitan does not
        tie; a tied embedding (also the head) takes Hugging Face's std 0.02 instead: N(0, 1)
        would make the head's first logits favour the input token by ~dim."""
        if name.endswith("norm.weight"):
            tensor.fill_(1.0)
        elif name.endswith("embed_tokens.weight"):
            nn.init.normal_(
                tensor, std=0.02 if self.cfg.tie_embeddings else 1.0, generator=generator
            )
        elif name.endswith("lm_head.weight"):
            std = self.cfg.dim**-0.5
            nn.init.trunc_normal_(tensor, std=std, a=-3 * std, b=3 * std, generator=generator)
        elif match := _DEPTH_SCALED.search(name):
            std = 0.02 / math.sqrt(2 * (int(match.group(1)) + 1))
            nn.init.trunc_normal_(tensor, std=std, generator=generator)
        else:
            nn.init.trunc_normal_(tensor, std=0.02, generator=generator)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        documents: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits, or the mean cross-entropy against ``targets`` when given.

        ``documents`` (``[batch, seq]``, each position's document in its row) keeps attention
        within a document and restarts positions at each one (``data.document_mask=true``).

        A pipeline stage is this model with some parts removed (set to ``None``): given hidden
        states (floats) instead of token ids it skips the embeddings, and without the head it
        returns hidden states.
        """
        if torch.is_floating_point(idx):
            x = idx
        elif self.embed_tokens is not None:
            x = self.embed_tokens(idx)
        else:
            raise ValueError("a pipeline stage after the first takes hidden states, not token ids")
        masked = () if documents is None else document_mask.attention_mask(documents)
        for layer in self.layers.values():
            x = layer(x, *masked, rope=self.rope)
        if self.lm_head is None:
            return x
        return self.head_loss(x, targets)

    def eager_head_loss(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """The final norm and the output head, then the mean cross-entropy against
        ``targets`` when given: a method of its own so ``trainer.compile`` compiles it apart
        from the blocks (:meth:`LlamaParallelize.compile_head`), fusing the norm, the logits'
        casts and the loss's log-softmax."""
        if self.norm is None or self.lm_head is None:
            raise ValueError("only the last pipeline stage holds the output head")
        logits = self.lm_head(self.norm(x))
        if isinstance(logits, DTensor):  # a vocabulary-sharded head (tensor parallel)
            if targets is None:
                return logits.full_tensor()
            return VocabParallelLoss.apply(logits, targets)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    @torch.no_grad()
    def init_buffers(self) -> None:
        """Fill the ``rope`` buffer: cos and sin of positions up to ``max_seq_len``, at build
        and after a meta-device model is materialised. One table for the model, handed to
        every layer: one per layer cost ``n_layers`` copies (640 MiB per GPU at 70B, 80 layers
        x 8192 positions x 128 x fp32 x 2). Computed once, not per forward: under
        ``torch.compile`` a table computed in the block is fused into the kernels that rotate
        q and k, so cos and sin ran once per element of every head and batch row, forward and
        backward (7% of a llama_small step, bf16, batch 8 x 512, inductor's kernel profile).
        Not in the state dict."""
        if not self.rope.is_meta:
            _, seq_len, head_dim = self.rope.shape
            tables = rope_tables(
                seq_len, head_dim, self.cfg.rope_theta, "cpu", self.cfg.rope_scaling
            )
            self.rope.copy_(torch.stack(tables))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters; the token embedding table excluded by default (a lookup, no FLOPs), an
        untied head included. A tied weight is the head's matmul as well, so it counts."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and not self.cfg.tie_embeddings and self.embed_tokens is not None:
            n -= self.embed_tokens.weight.numel()
        return n

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6N + 12·L·H·Q·T (PaLM, appendix B); H·Q is ``dim``."""
        return 6 * self.num_params() + 12 * self.cfg.n_layers * self.cfg.dim * seq_len

    def generate(
        self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8, top_k: int = 40
    ) -> torch.Tensor:
        """Append ``new_tokens`` sampled tokens to ``idx`` (batch, seq)."""
        return sample(self, idx, new_tokens, self.cfg.max_seq_len, temperature, top_k)
