"""Checkpoint cost against plain torch.save/torch.load and the disk's raw write rate.

A model with over 200 MB of state whose large embedding is frozen (so one optimizer step
changes only part of the state). Measured side by side in one run:

- synchronous save time (xirang, async off) vs torch.save, and the raw disk write rate
- the training stall of an async save (the copy to CPU) vs the synchronous save
- bytes written by an incremental save after one optimizer step vs the bytes that changed
- restore time (read, verify checksums, load into model and optimizer) vs torch.load alone
  (the headline) and vs torch.load plus load_state_dict into the model and optimizer

Last line: ``async_stall_ratio=<stall/sync> incremental_bytes_ratio=<new/full>
restore_vs_torch=<xirang restore time / torch.load time>``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch

from xirang_core.checkpoint.manager import CheckpointManager
from xirang_core.specs import WorkerContext


def build(vocab: int, width: int, layers: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, width),
        *[torch.nn.Linear(width, width) for _ in range(layers)],
    )
    model[0].weight.requires_grad_(False)  # frozen embeddings: the part that does not change
    optim = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return model, optim


def step(model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
    x = torch.randint(0, model[0].num_embeddings, (64,))
    model(x).pow(2).mean().backward()
    optim.step()
    optim.zero_grad(set_to_none=True)


def state_bytes(model: torch.nn.Module, optim: torch.optim.Optimizer) -> tuple[int, int]:
    """(all state, state one optimizer step changes: trainable params and their moments)."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    moments = sum(
        t.numel() * t.element_size()
        for s in optim.state.values()
        for t in s.values()
        if torch.is_tensor(t)
    )
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    return params + moments, trainable + moments


def load_plain(path: Path, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
    """A restore with plain PyTorch: torch.load, then into the model and the optimizer."""
    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])


def same_state(
    model: torch.nn.Module, optim: torch.optim.Optimizer, other: torch.nn.Module, other_optim
) -> bool:
    """Whether parameters and every optimizer state tensor are bitwise equal."""
    pairs = list(zip(model.parameters(), other.parameters(), strict=True))
    if not all(torch.equal(a, b) for a, b in pairs):
        return False
    mine, theirs = optim.state_dict()["state"], other_optim.state_dict()["state"]
    return mine.keys() == theirs.keys() and all(
        torch.equal(mine[i][k], theirs[i][k]) for i in mine for k in mine[i]
    )


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def manager(run: Path, model: torch.nn.Module, optim: torch.optim.Optimizer, **kw: object):
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), str(run), {})
    settings = {"interval": 0, "keep": 10, **kw}
    return CheckpointManager.from_config({"checkpoint": settings}, ctx, model, optim)


def raw_write_rate(folder: Path, size: int) -> float:
    """Bytes per second of one large buffered write (no fsync, like torch.save)."""
    data = os.urandom(1 << 20) * (size >> 20)
    path = folder / "raw.bin"
    seconds = timed(lambda: path.write_bytes(data))
    path.unlink()
    return len(data) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--vocab", type=int, default=60_000)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp folder)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, optim = build(args.vocab, args.width, args.layers)
    step(model, optim)
    total, changing = state_bytes(model, optim)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        rate = raw_write_rate(root, total)
        state = {"model": model.state_dict(), "optim": optim.state_dict()}
        torch_save = timed(lambda: torch.save(state, root / "plain.pt"))
        torch_load = timed(lambda: torch.load(root / "plain.pt", weights_only=True))
        plain_model, plain_optim = build(args.vocab, args.width, args.layers)
        torch_restore = timed(lambda: load_plain(root / "plain.pt", plain_model, plain_optim))

        sync = manager(root / "sync", model, optim, async_save=False)
        sync_save = timed(lambda: sync.save(1))

        run = root / "async"
        asynchronous = manager(run, model, optim)
        first_stall = timed(lambda: asynchronous.save(1))  # allocates the staging buffers
        first = asynchronous.wait(raise_errors=True)
        step(model, optim)
        stall = timed(lambda: asynchronous.save(2))  # every later save: a copy into them
        second = asynchronous.wait(raise_errors=True)

        fresh_model, fresh_optim = build(args.vocab, args.width, args.layers)
        restorer = manager(run, fresh_model, fresh_optim)
        restore = timed(restorer.restore)
        same = same_state(model, optim, fresh_model, fresh_optim)

    mb = 1e6
    new, full = second.bytes_new / mb, second.bytes_total / mb
    background = first.timings["serialise_s"] + first.timings["store_s"]
    print(f"state {total / mb:.0f} MB, of which one step changes {changing / mb:.0f} MB")
    print(f"raw disk write         {rate / mb:8.0f} MB/s  ({total / rate:.3f} s for the state)")
    print(f"torch.save             {torch_save:8.3f} s")
    print(f"xirang save (sync)     {sync_save:8.3f} s")
    print(f"xirang async stall     {stall:8.3f} s  (first {first_stall:.3f}, bg {background:.3f})")
    print(
        f"incremental save       {new:8.1f} MB new of {full:.1f} MB "
        f"(changed {changing / mb:.1f} MB: {second.bytes_new / changing - 1:+.1%})"
    )
    print(f"torch.load             {torch_load:8.3f} s")
    print(f"torch.load + load_state_dict into model and optimizer {torch_restore:8.3f} s")
    print(f"xirang restore         {restore:8.3f} s  (verified, loaded; state equal: {same})")
    print(
        f"async_stall_ratio={stall / sync_save:.3f} "
        f"incremental_bytes_ratio={second.bytes_new / second.bytes_total:.3f} "
        f"restore_vs_torch={restore / torch_load:.2f}"
    )


if __name__ == "__main__":
    main()
