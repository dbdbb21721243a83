"""How a Llama may be split: tensor/sequence-parallel layout, pipeline stages, shape.

The mechanics are the core's (``xirang.model.layers``); this names the Llama's modules.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from xirang import ConfigError
from xirang.model import ModelShape, keep_stage, parallelize_blocks
from xirang.specs import SplitPlanBase
from xirang_llama.config import LlamaConfig
from xirang_llama.model import Llama


def _llama(model: nn.Module) -> Llama:
    """``model`` as the Llama this plan splits (a plan is the family's own)."""
    if not isinstance(model, Llama):
        raise TypeError(f"the Llama's split plan was given a {type(model).__name__}")
    return model


class LlamaParallelize(SplitPlanBase):
    """The Llama family's answers to the questions a parallel strategy asks."""

    #: the ``model`` setting that counts layers (the planner's probes build one-layer models)
    layers_setting = "n_layers"

    def layers(self, model: nn.Module) -> nn.ModuleDict:
        """The repeated layers, keyed by index (units of FSDP, recompute and stages)."""
        return _llama(model).layers

    def compile_head(self, model: nn.Module) -> None:
        """Compile the final norm, output head and cross-entropy (``Llama.head_loss``) as one
        graph: eager, autocast writes the bf16 logits, casts them to fp32 and the loss runs a
        separate log-softmax over them, forward and backward. Measured on llama_small (batch
        8 x 512, bf16, 2 CPU threads, best of 6): a step 1.29x faster than the blocks compiled
        alone. A pipeline stage without the head has nothing to compile; a vocabulary-sharded
        head (tensor parallel) runs its loss eagerly, under ``loss_parallel``."""
        llama = _llama(model)
        if llama.lm_head is not None and not isinstance(llama.lm_head.weight, DTensor):
            llama.head_loss = torch.compile(llama.head_loss)

    def shape(self, settings: dict[str, Any], seq_len: int) -> ModelShape:
        """Model dimensions for the planner, from the ``model`` config section. Grouped-query
        attention narrows k and v to ``n_kv_heads`` heads; SwiGLU has three FFN matrices and
        keeps four ``ffn_dim``-wide activations for backward."""
        cfg = LlamaConfig(**settings)
        try:  # every run asks before its workers start: bad settings stop here
            cfg.check()
        except ValueError as exc:
            raise ConfigError(f"model.{exc}") from None
        h, kv = cfg.dim, cfg.n_kv_heads * cfg.head_dim
        layer = 2 * h * h + 2 * h * kv + 3 * h * cfg.ffn_dim + 2 * h
        embed = cfg.vocab_size * h
        params = cfg.n_layers * layer + embed + h + (0 if cfg.tie_embeddings else embed)
        return ModelShape(
            layers=cfg.n_layers,
            hidden=h,
            heads=cfg.n_heads,
            vocab=cfg.vocab_size,
            seq_len=seq_len,
            params=params,
            tied_embeddings=cfg.tie_embeddings,
            kv_heads=cfg.n_kv_heads,
            layer_params=layer,
            split_activations=2 + 2 * cfg.n_kv_heads / cfg.n_heads + 4 * cfg.ffn_dim / h,
            vocab_parallel=True,  # apply_tp: rowwise embeddings, colwise head, loss_parallel
        )

    def apply_tp(self, model: nn.Module, mesh: Any, sequence_parallel: bool) -> None:
        """torchtitan's plan: the Megatron layout per layer (q, k, v, gate and up split by
        columns: heads, hidden units; o and down by rows; with sequence parallel the RMSNorms
        and the residual stream split along the sequence), the embedding table split by rows
        (vocabulary: each rank looks up its share, one all-reduce joins them) and the output
        head by columns (vocabulary), its logits left sharded for the vocabulary-parallel
        loss (:class:`~xirang_llama.model.VocabParallelLoss`): neither the table nor the
        logits (128k wide at Llama 3) is held whole by any rank."""
        llama = _llama(model)
        self._parallelize_ends(llama, mesh)
        parallelize_blocks(
            llama.layers,
            llama.norm,
            mesh,
            sequence_parallel,
            colwise=(
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "mlp.gate_proj",
                "mlp.up_proj",
            ),
            rowwise=("self_attn.o_proj", "mlp.down_proj"),
            norms=("input_layernorm", "post_attention_layernorm"),
            gathered=("self_attn", "mlp"),
        )

    @staticmethod
    def _parallelize_ends(model: Llama, mesh: Any) -> None:
        """Embeddings rowwise and head colwise over ``mesh``; a tied pair is split alike (both
        ``Shard(0)``) and tied again. A pipeline stage keeps them replicated: its schedule
        computes the loss outside the model, on whole logits (the vocabulary-parallel loss
        under a pipeline is not done yet: its collectives did not pair up across stages)."""
        if not model.vocab_parallel:
            return
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )

        if model.embed_tokens is not None:
            rowwise = RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
            parallelize_module(model.embed_tokens, mesh, rowwise)
        if model.lm_head is not None:
            colwise = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
            parallelize_module(model.lm_head, mesh, colwise)
            if model.cfg.tie_embeddings and model.embed_tokens is not None:
                model.lm_head.weight = model.embed_tokens.weight

    def fsdp_units(self, model: nn.Module) -> list[list[nn.Module]]:
        """The FSDP2 units beside the layers, in forward order (torchtitan's layout): the
        embeddings, then the final norm with the head, so neither stays gathered in the root
        all step. A tied pair shares one parameter and so one unit. A pipeline stage names
        only the parts it holds."""
        llama = _llama(model)
        ends: tuple[list[nn.Module | None], ...] = [llama.embed_tokens], [llama.norm, llama.lm_head]
        if llama.cfg.tie_embeddings and llama.embed_tokens is not None:
            ends = [], [llama.embed_tokens, llama.norm, llama.lm_head]
        units = [[m for m in unit if m is not None] for unit in ends]
        return [unit for unit in units if unit]

    def split_stage(
        self, model: nn.Module, stage: int, stages: int, bounds: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        """This stage's layers (:func:`xirang.model.keep_stage`); the first stage keeps the
        embeddings, the last the final norm and head. Returns the kept layer range."""
        llama = _llama(model)
        kept = keep_stage(llama.layers, stage, stages, bounds)
        llama.vocab_parallel = stages == 1
        if stage > 0 and not (stage == stages - 1 and llama.cfg.tie_embeddings):
            # a tied last stage keeps the embedding module as the owner of the weight it
            # shares with the head, so that weight keeps its whole-model name in checkpoints
            llama.embed_tokens = None
        if stage < stages - 1:
            llama.norm = llama.lm_head = None
        return kept

    def tied(self, model: nn.Module) -> nn.Parameter | None:
        """The parameter a pipeline-split model holds on both its first and last stage:
        the embedding when tied to the head, else none."""
        llama = _llama(model)
        if not llama.cfg.tie_embeddings:
            return None
        holder = llama.embed_tokens if llama.embed_tokens is not None else llama.lm_head
        return holder.get_parameter("weight") if holder is not None else None
