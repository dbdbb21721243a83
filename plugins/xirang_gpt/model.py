"""A complete GPT in one file, in the manner of nanoGPT, plus what xirang asks of a model:
its parameter count, FLOPs per token (for MFU), and sampling."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from xirang.model import init_parameters, sample
from xirang.specs import ModelBase
from xirang_gpt.config import GPTConfig

#: parameters of the residual projections, drawn with GPT-2's depth-scaled deviation
RESIDUAL_PROJECTIONS = ("proj.weight", "down.weight")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.head_dim = cfg.n_embd // cfg.n_head
        # separate projections so tensor parallel can split each one by heads
        self.q = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.k = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.v = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=False)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq = x.shape[:2]
        # heads are counted from the projection's width: under tensor parallel a worker holds
        # only its share of them
        q, k, v = (
            p(x).view(batch, seq, -1, self.head_dim).transpose(1, 2)
            for p in (self.q, self.k, self.v)
        )
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout)
        return self.proj(y.transpose(1, 2).reshape(batch, seq, -1))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=False)
        self.down = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module, ModelBase):
    #: the parts a pipeline stage may drop (:meth:`GPTParallelize.split_stage`)
    tok_emb: nn.Embedding | None
    pos_emb: nn.Embedding | None
    drop: nn.Dropout | None
    ln_f: nn.LayerNorm | None
    head: nn.Linear | None

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        cfg.check()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos_emb = nn.Embedding(cfg.max_seq_len, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        # a dict keyed by layer index: a pipeline stage drops the layers it does not run and
        # the others keep their names, so checkpoints line up across strategies
        self.blocks = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layer)})
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # tied: fewer parameters, better small models; the weight keeps the embedding's name
        # (named_parameters yields it once, first), so it is drawn once, as tok_emb.weight
        self.head.weight = self.tok_emb.weight
        init_parameters(self)

    @classmethod
    def from_config(cls, settings: dict) -> GPT:
        return cls(GPTConfig(**settings))

    def param_init(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        """GPT-2's init, by parameter name: LayerNorms (``ln*``) weight 1 and bias 0, the
        residual projections normal with deviation 0.02/sqrt(2·layers), every other weight
        (embeddings, q/k/v, MLP up, the tied head) normal with deviation 0.02."""
        module, kind = name.rsplit(".", 1)
        if module.rsplit(".", 1)[-1].startswith("ln"):
            tensor.fill_(1.0 if kind == "weight" else 0.0)
        elif name.endswith(RESIDUAL_PROJECTIONS):
            tensor.normal_(0.0, 0.02 / math.sqrt(2 * self.cfg.n_layer), generator=generator)
        else:
            tensor.normal_(0.0, 0.02, generator=generator)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, or the mean cross-entropy against ``targets`` when given.

        A pipeline stage is this model with some parts removed (set to ``None``): given hidden
        states (floats) instead of token ids it skips the embeddings, and without the head it
        returns hidden states.
        """
        x = idx
        if not torch.is_floating_point(idx):
            if self.tok_emb is None or self.pos_emb is None or self.drop is None:
                raise ValueError("a pipeline stage after the first takes hidden states, not ids")
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks.values():
            x = block(x)
        if self.head is None or self.ln_f is None:
            return x
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters; position embeddings excluded by default, as PaLM's FLOP count does (a
        pipeline stage after the first holds none)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and self.pos_emb is not None:
            return n - self.pos_emb.weight.numel()
        return n

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6N + 12·L·h·s (PaLM, appendix B)."""
        return 6 * self.num_params() + 12 * self.cfg.n_layer * self.cfg.n_embd * seq_len

    def generate(
        self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8, top_k: int = 40
    ) -> torch.Tensor:
        """Append ``new_tokens`` sampled tokens to ``idx`` (batch, seq)."""
        return sample(self, idx, new_tokens, self.cfg.max_seq_len, temperature, top_k)
