"""``comm=powersgd``: rank-r low-rank gradient compression with error feedback (Vogels et al.,
2019).

Each gradient matrix M (n x m, plus the error left from the last step) is approximated as P Q^T:
P = M Q is summed over workers and orthonormalised, Q = M^T P is averaged, and the part of M the
approximation missed is kept as error for the next step. The wire carries (n + m) r numbers per
matrix instead of n m. Vectors, and matrices too small to gain, travel uncompressed in the same
all-reduce as the P factors. With ``warm_start`` the Q of the last step seeds the next, which is
what lets rank 1-4 work: one power iteration per step refines the last step's subspace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from xirang import ConfigError
from xirang.comm import SerialLane
from xirang_comm.base import CommSettings, GradientSync, param_views


@dataclass
class PowerSGDSettings(CommSettings):
    """``rank``: columns of P and Q. ``start_iter``: steps of plain all-reduce first (early
    gradients change direction too fast to compress). ``warm_start``: reuse last step's Q."""

    rank: int = 4
    start_iter: int = 10
    warm_start: bool = True
    seed: int = 0


@dataclass
class _Matrix:
    """One compressed gradient in a bucket: its view, its factors and its error."""

    key: int  # the parameter's storage address: stable across steps and bucket rebuilds
    grad: torch.Tensor  # n x m view into the bucket
    error: torch.Tensor
    q: torch.Tensor
    p: torch.Tensor | None = None


class PowerSGD(GradientSync):
    name = "powersgd"
    settings_type = PowerSGDSettings

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        if self.settings.rank < 1:
            raise ConfigError(f"comm.rank={self.settings.rank}: PowerSGD's rank must be >= 1")
        self.errors: dict[int, torch.Tensor] = {}
        self.qs: dict[int, torch.Tensor] = {}
        self.passes = 0
        self.lane = SerialLane("xirang-powersgd")
        self.compressed_calls = 0

    def sync(self, bucket: dist.GradBucket) -> torch.futures.Future:
        """Plain all-reduce for the first ``start_iter`` backward passes, then compressed."""
        warmup = self.passes < self.settings.start_iter
        if bucket.is_last():
            self.passes += 1
        buffer = bucket.buffer()
        if warmup:
            return self.lane.submit(
                lambda: self.comm.all_reduce(buffer).wait().div_(self.world_size)
            )
        self.compressed_calls += 1
        matrices, plain = self._split(bucket)
        return self.lane.submit(lambda: self._exchange(buffer, matrices, plain))

    def _split(self, bucket: dist.GradBucket) -> tuple[list[_Matrix], list[torch.Tensor]]:
        """The bucket's gradients that gain from compression, and the ones sent as they are."""
        rank = self.settings.rank
        matrices, plain = [], []
        for param, view in zip(bucket.parameters(), param_views(bucket), strict=True):
            grad = view.reshape(view.shape[0], -1) if view.dim() >= 2 else view
            n, m = (grad.shape[0], grad.shape[1]) if grad.dim() == 2 else (0, 0)
            if grad.dim() != 2 or (n + m) * min(rank, n, m) >= n * m:
                plain.append(view)
                continue
            r = min(rank, n, m)
            key = param.data_ptr()
            error = self.errors.setdefault(key, torch.zeros_like(grad))
            q = self.qs.get(key)
            if q is None or not self.settings.warm_start:
                q = self._random_q(m, r, grad)
            matrices.append(_Matrix(key, grad, error, q))
        return matrices, plain

    def _random_q(self, m: int, r: int, like: torch.Tensor) -> torch.Tensor:
        """The same random start on every worker: seeded by the settings, the shape and (without
        warm start, which draws once) the count of compressed buckets, equal on all workers."""
        calls = 0 if self.settings.warm_start else self.compressed_calls
        gen = torch.Generator().manual_seed(hash((self.settings.seed, m, r, calls)) % 2**63)
        return torch.randn(m, r, generator=gen).to(like)

    def _exchange(
        self, buffer: torch.Tensor, matrices: list[_Matrix], plain: list[torch.Tensor]
    ) -> torch.Tensor:
        """Both rounds for one bucket, on the serial lane; returns the averaged buffer."""
        world = self.world_size
        for mat in matrices:
            mat.grad.add_(mat.error)
            mat.p = mat.grad @ mat.q
        ps = [m.p.reshape(-1) for m in matrices]  # type: ignore[union-attr]
        summed = self.comm.all_reduce(torch.cat([*ps, *(v.reshape(-1) for v in plain)])).wait()
        offset = _unpack_ps(summed, matrices)
        _unpack_plain(summed[offset:], plain, world)
        if not matrices:
            return buffer
        for mat in matrices:
            mat.p = torch.linalg.qr(mat.p).Q
            mat.q = mat.grad.T @ mat.p
        qs = self.comm.all_reduce(torch.cat([m.q.reshape(-1) for m in matrices])).wait()
        qs.div_(world)
        offset = 0
        for mat in matrices:
            mat.q = qs[offset : offset + mat.q.numel()].view_as(mat.q)
            offset += mat.q.numel()
            approx = mat.p @ mat.q.T
            mat.error.copy_(mat.grad - approx)
            mat.grad.copy_(approx)
            self.qs[mat.key] = mat.q.clone()
        return buffer

    def extra_report(self) -> dict[str, Any]:
        return {"rank": self.settings.rank, "compressed_buckets": self.compressed_calls}


def _unpack_ps(summed: torch.Tensor, matrices: list[_Matrix]) -> int:
    offset = 0
    for mat in matrices:
        assert mat.p is not None
        mat.p = summed[offset : offset + mat.p.numel()].view_as(mat.p)
        offset += mat.p.numel()
    return offset


def _unpack_plain(summed: torch.Tensor, plain: list[torch.Tensor], world: int) -> None:
    offset = 0
    for view in plain:
        view.copy_(summed[offset : offset + view.numel()].view_as(view).div_(world))
        offset += view.numel()
