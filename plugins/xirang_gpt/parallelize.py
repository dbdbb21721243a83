"""How a GPT may be split: tensor/sequence-parallel layouts, pipeline stages, layer list.

This is the GPT family's own plan, in the manner of torchtitan's per-model parallelize
functions; ``xirang_torch`` strategies call it through the ``parallelize`` target of the model's
spec, so a new model family brings its own plan and the strategies stay model-agnostic.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from xirang_core.parallel.plan import ModelShape


class GPTParallelize:
    """The GPT family's answers to the questions a parallel strategy asks."""

    def layers(self, model: nn.Module) -> nn.ModuleDict:
        """The repeated blocks, keyed by layer index (units of FSDP, recompute and stages)."""
        return model.blocks

    def shape(self, settings: dict[str, Any], seq_len: int) -> ModelShape:
        """Model dimensions for the planner, from the ``model`` config section."""
        from xirang_gpt.model import GPTConfig

        cfg = GPTConfig(**settings)
        h, layers, vocab = cfg.n_embd, cfg.n_layer, cfg.vocab_size
        params = layers * (12 * h * h + 4 * h) + vocab * h + cfg.max_seq_len * h + 2 * h
        return ModelShape(layers, h, cfg.n_head, vocab, seq_len, params, cfg.max_seq_len)

    def apply_tp(self, model: nn.Module, mesh: Any, sequence_parallel: bool) -> None:
        """Megatron layout per block: q, k, v and MLP-up split by columns (heads), attention
        output and MLP-down by rows; with sequence parallel the norms and residual stream are
        split along the sequence between blocks. Embeddings and head stay replicated."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            PrepareModuleInput,
            RowwiseParallel,
            SequenceParallel,
            parallelize_module,
        )

        between = Shard(1) if sequence_parallel else Replicate()
        gather = PrepareModuleInput(
            input_layouts=(between,), desired_input_layouts=(Replicate(),), use_local_output=True
        )
        plan: dict[str, Any] = {
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(output_layouts=between),
            "mlp.up": ColwiseParallel(),
            "mlp.down": RowwiseParallel(output_layouts=between),
        }
        if sequence_parallel:
            plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel()})
            plan.update({"attn": gather, "mlp": gather})
        for block in self.layers(model).values():
            parallelize_module(block, mesh, plan)
        if sequence_parallel:
            self._split_sequence_at_ends(model, mesh)

    def _split_sequence_at_ends(self, model: nn.Module, mesh: Any) -> None:
        """The first block takes its sequence share of the (replicated) embeddings; the final
        norm gathers the whole sequence back before the replicated head."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

        blocks = self.layers(model)
        if len(blocks):
            first = next(iter(blocks.values()))
            split = PrepareModuleInput(
                input_layouts=(Replicate(),),
                desired_input_layouts=(Shard(1),),
                use_local_output=True,
            )
            parallelize_module(first, mesh, split)
            last = list(blocks.values())[-1]
            join = PrepareModuleInput(
                input_layouts=(Shard(1),),
                desired_input_layouts=(Replicate(),),
                use_local_output=True,
            )
            # the block after the last one is the final norm: gather there, on the last stage
            if model.ln_f is not None:
                parallelize_module(model.ln_f, mesh, join)
            else:  # a middle pipeline stage hands the whole sequence to the next stage
                last.register_forward_hook(_gather_sequence_hook(mesh))

    def split_stage(self, model: nn.Module, stage: int, stages: int) -> tuple[int, int]:
        """Keep only this stage's contiguous, balanced share of layers; the first stage keeps
        the embeddings, the last the final norm and head. Returns the kept layer range."""
        names = list(self.layers(model).keys())
        lo, hi = stage_bounds(len(names), stage, stages)
        for name in names[:lo] + names[hi:]:
            del model.blocks[name]
        if stage > 0:
            model.pos_emb = model.drop = None
            if stage < stages - 1:
                model.tok_emb = None
            # the last stage keeps the embedding module only as the owner of the weight it
            # shares with the head, so that weight keeps its whole-model name in checkpoints
        if stage < stages - 1:
            model.ln_f = model.head = None
        return lo, hi

    def tied(self, model: nn.Module) -> nn.Parameter | None:
        """The parameter a pipeline-split model holds on both its first and last stage."""
        if model.tok_emb is not None:
            return model.tok_emb.weight
        return model.head.weight if model.head is not None else None


def stage_bounds(layers: int, stage: int, stages: int) -> tuple[int, int]:
    """Layer range of ``stage``: sizes differ by at most one, later stages take the extra
    layers because the first stage also holds the embeddings."""
    base, extra = divmod(layers, stages)
    lo = stage * base + max(0, stage - (stages - extra))
    return lo, lo + base + (1 if stage >= stages - extra else 0)


def _gather_sequence_hook(mesh: Any) -> Any:
    from torch.distributed.tensor import DTensor, Replicate, Shard

    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        full = DTensor.from_local(output, mesh, (Shard(1),), run_check=False)
        return full.redistribute(mesh, (Replicate(),)).to_local()

    return hook
