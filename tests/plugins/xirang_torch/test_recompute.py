"""Activation checkpointing, full and selective: the same loss and gradients as none, with the
recompute each policy promises (counted as the matmuls backward re-runs)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from xirang_llama.model import Llama, LlamaConfig
from xirang_torch.recompute import check_settings, checkpoint_layers

from xirang_core.errors import ConfigError
from xirang_core.plugins import get_registry

CFG = LlamaConfig(dim=32, n_layers=4, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=40)
#: the matmuls one layer's forward runs: q/k/v stacked, o, gate/up stacked, down
LAYER_MATMULS = 4


class MatmulCount(TorchDispatchMode):
    """Counts the matmuls run while active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


def run(mode: str, every: int = 0) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Loss, gradients by parameter name and matmuls in backward of one step under ``mode``."""
    torch.manual_seed(0)
    model = copy.deepcopy(BASE)
    checkpoint_layers(model.layers, mode, every)
    x = torch.randint(0, CFG.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    loss = model(x, x)
    with MatmulCount() as counted:
        loss.backward()
    grads = {
        n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in model.named_parameters()
    }
    return loss.detach(), grads, counted.count


torch.manual_seed(0)
BASE = Llama(CFG)


@pytest.mark.parametrize(("mode", "every"), [("full", 0), ("selective", 0), ("selective", 2)])
def test_same_loss_and_gradients_as_no_recompute(mode: str, every: int) -> None:
    loss, grads, _ = run("none")
    loss_ac, grads_ac, _ = run(mode, every)
    assert torch.equal(loss, loss_ac)
    assert grads.keys() == grads_ac.keys()
    for name, grad in grads.items():
        torch.testing.assert_close(grads_ac[name], grad, rtol=0, atol=1e-6, msg=name)


def test_each_policy_recomputes_what_it_promises() -> None:
    """Full re-runs each layer's forward matmuls up to the last one backward reads (the
    down projection's output is only added to the residual, and non-reentrant checkpointing
    stops once it has what backward needs); op-level keeps the 1st and 3rd matmul and so
    re-runs only the o projection's; every Nth layer re-runs a 1/N share of full's."""
    base = run("none")[2]
    full = CFG.n_layers * (LAYER_MATMULS - 1)
    assert run("full")[2] - base == full
    assert run("selective", 0)[2] - base == CFG.n_layers
    assert run("selective", 2)[2] - base == full // 2
    assert run("selective", 4)[2] - base == full // 4
    # selective op-level checkpoints every layer, the layer policy only every Nth
    model = copy.deepcopy(BASE)
    checkpoint_layers(model.layers, "selective", 3)
    wrapped = [type(layer).__name__ == "CheckpointWrapper" for layer in model.layers.values()]
    assert wrapped == [False, False, True, False]


@pytest.mark.parametrize(
    ("mode", "every", "needle"),
    [
        ("some", 0, "valid values are none, full, selective"),
        ("selective", -1, "must be 0 \\(op-level\\) or a layer count"),
        ("full", 2, "applies to parallel.recompute=selective only"),
    ],
)
def test_bad_settings_name_what_is_valid(mode: str, every: int, needle: str) -> None:
    assert check_settings("selective", 2) is None
    strategy = get_registry().spec("parallel", "fsdp").load_schema()
    data = {"parallel": {"name": "fsdp", "recompute": mode, "recompute_every": every}}
    with pytest.raises(ConfigError, match=needle):
        strategy.check(data)
