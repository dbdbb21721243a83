"""A ``transformers`` causal LM behind xirang's :class:`~xirang_core.specs.Model` contract.

The Hugging Face module does the forward pass (sdpa attention, no key/value cache); the loss,
the FLOP count, initialisation and sampling are xirang's, so an ``hf`` run's numbers compare
with a GPT's or a Llama's run on the same batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from xirang.model import sample
from xirang.specs import ModelBase
from xirang_hf.source import load_config

#: what transformers reads on a parameter to skip it in ``_init_weights``
HF_DONE = "_is_hf_initialized"


class HFCausalLM(nn.Module, ModelBase):
    """``self.hf`` is the transformers model; parameter names carry the ``hf.`` prefix."""

    #: ``param_init`` swaps a parameter of the module for its stand-in and draws from torch's
    #: global generator (transformers' ``_init_weights``): one parameter at a time
    param_init_threadsafe = False

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__()
        from transformers import AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        self.settings = settings
        self.config = load_config(settings)
        # xirang initialises (below): transformers' own pass would only be overwritten
        with no_init_weights():
            self.hf = AutoModelForCausalLM.from_config(
                self.config, attn_implementation="sdpa", dtype=torch.float32
            )
        self.hf.tie_weights()  # transformers ties inside the init it was told to skip
        self.max_seq_len = int(self.config.max_position_embeddings)
        if torch.empty(()).device.type != "meta":  # on meta, the worker's materialise draws
            from xirang.model import init_parameters

            init_parameters(self)

    @classmethod
    def from_config(cls, settings: dict[str, Any]) -> HFCausalLM:
        return cls(settings)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, or the mean cross-entropy against ``targets`` (as the GPT computes it)."""
        logits = self.hf(input_ids=idx, use_cache=False).logits
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    def param_init(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        """Transformers' own ``_init_weights`` for this parameter, drawn from ``generator``.

        The parameter is swapped for a stand-in over ``tensor`` and ``_init_weights`` runs on
        the modules above it, innermost first, as transformers' own pass visits them (GPT-2's
        block scales its residual projections after the layer drew them). Every other
        parameter is marked done, so transformers' init functions leave them alone. The
        global generator is seeded from ``generator`` inside ``fork_rng``: ``_init_weights``
        draws from torch's default generator."""
        path, _, leaf = name.rpartition(".")
        owner = self.get_submodule(path)
        original = owner._parameters[leaf]
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with _all_marked_done(self), torch.random.fork_rng(devices=[]):
            owner._parameters[leaf] = nn.Parameter(tensor, requires_grad=False)
            try:
                torch.manual_seed(seed)
                for module, pretrained in reversed(_chain(self.hf, path.removeprefix("hf"))):
                    pretrained._init_weights(module)
            finally:
                owner._parameters[leaf] = original

    def after_weights(self) -> None:
        """``model.lora_rank``: LoRA adapters over the (pretrained, now loaded) weights, which
        freeze (:mod:`xirang_hf.lora`)."""
        if self.settings.get("lora_rank"):
            from xirang_hf.lora import attach

            self.hf = attach(self.hf, self.settings)

    def init_buffers(self) -> None:
        """Recompute non-parameter buffers (RoPE frequencies) after a meta-device model is
        materialised: transformers' ``_init_weights`` of each module that owns buffers."""
        with _all_marked_done(self), torch.no_grad():
            for module, pretrained in _modules_with_buffers(self.hf):
                pretrained._init_weights(module)

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameters; by default without embedding tables that are only looked up (position
        tables, and the token table unless it doubles as the output head), as PaLM counts."""
        n = sum(p.numel() for p in self.parameters())
        if not non_embedding:
            return n
        head = self.hf.get_output_embeddings()
        head_weight = head.weight if head is not None else None
        lookups = {
            id(m.weight): m.weight.numel()
            for m in self.modules()
            if isinstance(m, nn.Embedding) and m.weight is not head_weight
        }
        return n - sum(lookups.values())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6N + 12·L·h·s (PaLM, appendix B)."""
        layers, hidden = self.config.num_hidden_layers, self.config.hidden_size
        return 6 * self.num_params() + 12 * layers * hidden * seq_len

    def generate(
        self, idx: torch.Tensor, new_tokens: int, temperature: float = 0.8, top_k: int = 40
    ) -> torch.Tensor:
        """Append ``new_tokens`` sampled tokens to ``idx`` (batch, seq)."""
        return sample(self, idx, new_tokens, self.max_seq_len, temperature, top_k)


def _chain(root: nn.Module, path: str) -> list[tuple[nn.Module, Any]]:
    """The modules from ``root`` down to ``path`` (dotted, may start with a dot), each with
    the transformers model whose ``_init_weights`` applies to it (the innermost one above)."""
    from transformers import PreTrainedModel

    chain, module, pretrained = [], root, root
    for part in [p for p in path.split(".") if p]:
        chain.append((module, pretrained))
        module = getattr(module, part)
        if isinstance(module, PreTrainedModel):
            pretrained = module
    chain.append((module, pretrained))
    return chain


def _modules_with_buffers(root: nn.Module) -> Iterator[tuple[nn.Module, Any]]:
    for name, module in root.named_modules():
        if any(True for _ in module.buffers(recurse=False)):
            yield _chain(root, name)[-1]


@contextlib.contextmanager
def _all_marked_done(model: nn.Module) -> Iterator[None]:
    """Mark every current parameter as initialised for transformers, and unmark afterwards."""
    params = [p for p in model.parameters() if not getattr(p, HF_DONE, False)]
    for p in params:
        setattr(p, HF_DONE, True)
    try:
        yield
    finally:
        for p in params:
            delattr(p, HF_DONE)
