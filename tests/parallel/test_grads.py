"""Gradient clipping of a split model: the single-process norm and scale, kept on the device."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from xirang.parallel import mark_duplicate
from xirang_core.parallel.grads import clip_grad_norm


@pytest.mark.parametrize("max_norm", [0.5, 1e9, float("inf")])
def test_a_split_models_gradients_clip_like_one_process_without_a_host_read(
    max_norm: float,
) -> None:
    """Sharded (DTensor) and whole gradients together: the norm and the clipped gradients
    equal torch's over the unsplit model, and the norm comes back as a tensor on the
    gradients' device (the loop reads it only at log steps)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    torch.manual_seed(0)
    whole = [torch.nn.Parameter(torch.randn(4, 4)), torch.nn.Parameter(torch.randn(4))]
    for p in whole:
        p.grad = torch.randn_like(p) * 3
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        sharded = torch.nn.Parameter(distribute_tensor(whole[0].detach(), mesh, [Shard(0)]))
        sharded.grad = distribute_tensor(whole[0].grad, mesh, [Shard(0)])
        plain = torch.nn.Parameter(whole[1].detach().clone())
        plain.grad = whole[1].grad.clone()
        norm = clip_grad_norm([sharded, plain], max_norm, mesh)
        want = torch.nn.utils.clip_grad_norm_(whole, max_norm)
        assert isinstance(norm, torch.Tensor) and norm.device == plain.grad.device
        torch.testing.assert_close(norm, want)
        torch.testing.assert_close(sharded.grad.full_tensor(), whole[0].grad)
        torch.testing.assert_close(plain.grad, whole[1].grad)
    finally:
        dist.destroy_process_group()


def test_the_second_copy_of_a_tied_weight_counts_once_in_the_norm() -> None:
    """The pipeline's last stage holds the tied embedding its first stage holds too: a copy
    marked as the second one is left out of the norm (the first holds the same gradient),
    and an equal parameter that is not marked still counts."""
    from torch.distributed.device_mesh import init_device_mesh

    first, second, other = (torch.nn.Parameter(torch.ones(3, 2)) for _ in range(3))
    for p in (first, second, other):
        p.grad = torch.full_like(p, 2.0)
    mark_duplicate(second)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))
        norm = clip_grad_norm([first, second, other], float("inf"), mesh)
        want = torch.nn.utils.get_total_norm([first.grad, other.grad])
        torch.testing.assert_close(norm, want)
    finally:
        dist.destroy_process_group()


def test_a_marked_copy_still_converts_where_torch_swaps_parameters() -> None:
    """``parallel=auto``'s smoke run converts pipeline stages whose tied copy is marked; a
    weak reference to the parameter made torch's swap on conversion fail ("Cannot swap t1
    because it has weakref associated with it"), the README's ``parallel=auto`` with it."""
    layer = torch.nn.Linear(4, 4)
    mark_duplicate(layer.weight)
    before = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        layer.to(torch.float64)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(before)
    assert layer.weight.dtype == torch.float64
