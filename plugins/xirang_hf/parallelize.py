"""How a Hugging Face model may be split: its decoder layers, its shape for the planner, and
tensor/sequence parallel for Llama-shaped architectures.

Pipeline parallel is not offered: transformers' forward runs the whole layer stack in one
call, so a stage cannot stop after its share of layers without re-writing each architecture's
forward. The planner never proposes it (``ModelShape.splits``) and a named plan is refused
before launch.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any

from torch import nn

from xirang import ConfigError
from xirang.model import ModelShape
from xirang.specs import SplitPlanBase
from xirang_hf.model import HFCausalLM

if TYPE_CHECKING:
    from transformers import PreTrainedModel

#: architectures whose decoder layers carry Llama's module names (q/k/v/o_proj, gate/up/down_proj,
#: input_layernorm, post_attention_layernorm, a final ``norm``)
LLAMA_SHAPED = ("llama", "mistral", "qwen2")


class LayerView(MutableMapping):
    """The decoder layers (a ``ModuleList`` inside the transformers model) keyed by layer
    index as strings, like the GPT's ``ModuleDict``: FSDP shards each value, recompute
    replaces each value in place, and transformers' own forward still iterates the list."""

    def __init__(self, layers: nn.ModuleList) -> None:
        self.layers = layers

    def __getitem__(self, key: str) -> nn.Module:
        return self.layers[int(key)]

    def __setitem__(self, key: str, layer: nn.Module) -> None:
        self.layers[int(key)] = layer

    def __delitem__(self, key: str) -> None:
        raise TypeError("the layers of a Hugging Face model cannot be removed (no pipeline)")

    def __iter__(self) -> Iterator[str]:
        return (str(i) for i in range(len(self.layers)))

    def __len__(self) -> int:
        return len(self.layers)


def _causal_lm(model: nn.Module) -> HFCausalLM:
    """``model`` as the ``hf`` family's model this plan splits (a plan is the family's own)."""
    if not isinstance(model, HFCausalLM):
        raise TypeError(f"the hf family's split plan was given a {type(model).__name__}")
    return model


class HFParallelize(SplitPlanBase):
    """The ``hf`` family's answers to the questions a parallel strategy asks."""

    def layers(self, model: nn.Module) -> LayerView:
        """The decoder layers: the module list as long as the config's layer count."""
        return LayerView(decoder_layers(_causal_lm(model).hf))

    def shape(self, settings: dict[str, Any], seq_len: int) -> ModelShape:
        """Dimensions from the config; parameters (all, and one decoder layer's) counted on a
        meta-device build."""
        import torch
        from transformers import AutoModelForCausalLM

        from xirang_hf.source import load_config

        config = load_config(settings)
        with torch.device("meta"):
            hf = AutoModelForCausalLM.from_config(config)
        embed = hf.get_input_embeddings()
        positions = [
            m.num_embeddings for m in hf.modules() if isinstance(m, nn.Embedding) and m is not embed
        ]
        head = hf.get_output_embeddings()
        heads = config.num_attention_heads
        return ModelShape(
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            heads=heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            layer_params=sum(p.numel() for p in decoder_layers(hf)[0].parameters()),
            vocab=config.vocab_size,
            seq_len=seq_len,
            params=sum(p.numel() for p in hf.parameters()),
            positions=sum(positions),
            tied_embeddings=head is not None and head.weight is embed.weight,
            splits=("tp",) if config.model_type in LLAMA_SHAPED else (),
        )

    def apply_tp(self, model: nn.Module, mesh: Any, sequence_parallel: bool) -> None:
        """Megatron layout per decoder layer, as the GPT's: q, k, v, gate and up split by
        columns (heads), o and down by rows; with sequence parallel the norms and residual
        stream are split along the sequence between layers, the first layer takes its share of
        the (replicated) embeddings and the final norm gathers the whole sequence back before
        the replicated head."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import parallelize_module

        lm = _causal_lm(model)
        model_type = lm.config.model_type
        if model_type not in LLAMA_SHAPED:
            raise ConfigError(
                f"tensor parallel for model=hf supports Llama-shaped models (model_type "
                f"{', '.join(LLAMA_SHAPED)}); this config is model_type '{model_type}'. "
                f"Use parallel=ddp or parallel=fsdp"
            )
        layers = self.layers(lm)
        plan = _layer_plan(sequence_parallel)
        for layer in layers.values():
            parallelize_module(layer, mesh, plan)
        if sequence_parallel:
            parallelize_module(layers["0"], mesh, _relayout(Replicate(), Shard(1)))
            parallelize_module(lm.hf.base_model.norm, mesh, _relayout(Shard(1), Replicate()))


def _layer_plan(sequence_parallel: bool) -> dict[str, Any]:
    """The tensor-parallel style of each module in a Llama-shaped decoder layer."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    between = Shard(1) if sequence_parallel else Replicate()
    plan: dict[str, Any] = {
        **{f"self_attn.{p}_proj": ColwiseParallel() for p in "qkv"},
        "self_attn.o_proj": RowwiseParallel(output_layouts=between),
        "mlp.gate_proj": ColwiseParallel(),
        "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=between),
    }
    if sequence_parallel:
        plan["input_layernorm"] = SequenceParallel()
        plan["post_attention_layernorm"] = SequenceParallel()
        # transformers passes the attention's input by keyword, the MLP's by position
        plan["self_attn"] = PrepareModuleInput(
            input_kwarg_layouts={"hidden_states": between},
            desired_input_kwarg_layouts={"hidden_states": Replicate()},
            use_local_output=True,
        )
        plan["mlp"] = _relayout(between, Replicate())
    return plan


def _relayout(have: Any, want: Any) -> Any:
    """Turn a module's first positional input from layout ``have`` into ``want``."""
    from torch.distributed.tensor.parallel import PrepareModuleInput

    return PrepareModuleInput(
        input_layouts=(have,), desired_input_layouts=(want,), use_local_output=True
    )


def decoder_layers(hf: PreTrainedModel) -> nn.ModuleList:
    """The transformers model's module list as long as its config's layer count."""
    count = hf.config.num_hidden_layers
    for module in hf.base_model.modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return module
    raise ConfigError(
        f"model=hf: found no list of {count} decoder layers in {type(hf).__name__}, "
        f"so it cannot be sharded layer by layer; use parallel=single or parallel=ddp"
    )
