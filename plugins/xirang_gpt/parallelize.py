"""How a GPT may be split: tensor/sequence-parallel layouts, pipeline stages, layer list.

This is the GPT family's own plan, in the manner of torchtitan's per-model parallelize
functions; ``xirang_torch`` strategies call it through the ``parallelize`` target of the model's
spec, so a new model family brings its own plan and the strategies stay model-agnostic.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from xirang.model import ModelShape, keep_stage, parallelize_blocks
from xirang.specs import SplitPlanBase
from xirang_gpt.config import GPTConfig
from xirang_gpt.model import GPT


def _gpt(model: nn.Module) -> GPT:
    """``model`` as the GPT this plan splits (a plan is the family's own)."""
    if not isinstance(model, GPT):
        raise TypeError(f"the GPT's split plan was given a {type(model).__name__}")
    return model


class GPTParallelize(SplitPlanBase):
    """The GPT family's answers to the questions a parallel strategy asks."""

    #: the ``model`` setting that counts layers (the planner's probes build one-layer models)
    layers_setting = "n_layer"

    def layers(self, model: nn.Module) -> nn.ModuleDict:
        """The repeated blocks, keyed by layer index (units of FSDP, recompute and stages)."""
        return _gpt(model).blocks

    def shape(self, settings: dict[str, Any], seq_len: int) -> ModelShape:
        """Model dimensions for the planner, from the ``model`` config section."""
        cfg = GPTConfig(**settings)
        h, layers, vocab = cfg.n_embd, cfg.n_layer, cfg.vocab_size
        params = layers * (12 * h * h + 4 * h) + vocab * h + cfg.max_seq_len * h + 2 * h
        return ModelShape(layers, h, cfg.n_head, vocab, seq_len, params, cfg.max_seq_len)

    def apply_tp(self, model: nn.Module, mesh: Any, sequence_parallel: bool) -> None:
        """Megatron layout per block: q, k, v and MLP-up split by columns (heads), attention
        output and MLP-down by rows; with sequence parallel the norms and residual stream are
        split along the sequence between blocks. Embeddings and head stay replicated."""
        gpt = _gpt(model)
        parallelize_blocks(
            gpt.blocks,
            gpt.ln_f,
            mesh,
            sequence_parallel,
            colwise=("attn.q", "attn.k", "attn.v", "mlp.up"),
            rowwise=("attn.proj", "mlp.down"),
            norms=("ln1", "ln2"),
            gathered=("attn", "mlp"),
        )

    def split_stage(
        self, model: nn.Module, stage: int, stages: int, bounds: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        """This stage's layers (:func:`xirang.model.keep_stage`); the first stage keeps the
        embeddings, the last the final norm and head. Returns the kept layer range."""
        gpt = _gpt(model)
        kept = keep_stage(gpt.blocks, stage, stages, bounds)
        if stage > 0:
            gpt.pos_emb = gpt.drop = None
            if stage < stages - 1:
                gpt.tok_emb = None
            # the last stage keeps the embedding module only as the owner of the weight it
            # shares with the head, so that weight keeps its whole-model name in checkpoints
        if stage < stages - 1:
            gpt.ln_f = gpt.head = None
        return kept

    def tied(self, model: nn.Module) -> nn.Parameter | None:
        """The parameter a pipeline-split model holds on both its first and last stage."""
        gpt = _gpt(model)
        holder = gpt.tok_emb if gpt.tok_emb is not None else gpt.head
        return holder.get_parameter("weight") if holder is not None else None
