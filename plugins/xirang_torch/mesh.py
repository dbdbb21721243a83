"""The device mesh of a plan: pipeline outermost, tensor parallel innermost.

Ranks that differ only in their tensor-parallel coordinate are neighbours, so on a multi-GPU
node the launcher's contiguous local ranks keep tensor parallel (the chattiest split) inside a
node, and pipeline stages (the quietest) span nodes.
"""

from __future__ import annotations

from typing import Any

MESH_DIMS = ("pp", "dp", "tp")


def build_mesh(device_type: str, dp: int, tp: int, pp: int) -> Any:
    """A 3-D ``DeviceMesh`` named ``pp``, ``dp``, ``tp`` over every rank of the process group."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=MESH_DIMS)
    if dp > 1 and tp > 1:
        # lets DTensor reduce over both dimensions in one collective (2-D gradient norms)
        mesh["dp", "tp"]._flatten("dp_tp")
    return mesh


def degree(mesh: Any, dim: str) -> int:
    return mesh[dim].size() if mesh is not None else 1


def coordinate(mesh: Any, dim: str) -> int:
    return mesh[dim].get_local_rank() if mesh is not None else 0
