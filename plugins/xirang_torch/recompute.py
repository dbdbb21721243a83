"""Activation checkpointing: keep only each layer's input and recompute the rest in backward."""

from __future__ import annotations

from torch import nn


def checkpoint_layers(layers: nn.ModuleDict) -> None:
    """Wrap every layer in place. The wrapper's state-dict hooks strip its own name, so
    checkpoints of a recomputing run load into one that does not, and back."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for name, layer in list(layers.items()):
        layers[name] = checkpoint_wrapper(layer, preserve_rng_state=False)
