"""Checkpoint cost against plain torch.save/torch.load and the disk's raw write rate.

A model with over 200 MB of state whose large embedding is frozen (so one optimizer step
changes only part of the state). Measured side by side in one run:

- synchronous save time (xirang, async off) vs torch.save, and the raw disk write rate; of the
  save, the seconds its fsyncs take (a commit is durable: chunks, then manifest, then folders)
- the training stall of an async save (the copy to CPU) vs the synchronous save
- bytes written by an incremental save after one optimizer step vs the bytes that changed, in
  three cases: the frozen embedding above; pre-training, where every tensor trains (an
  optimizer step changes every trainable tensor and its moments: incremental saves nothing);
  a fine-tune with the embedding and the lower three quarters of the layers frozen
- restore time (read, verify checksums, load into model and optimizer) vs torch.load alone
  (the headline), vs torch.load plus load_state_dict into the model and optimizer, and vs
  torch.load(mmap=True) plus load_state_dict; each warm (files in the page cache) and cold
  (the files' pages dropped with posix_fadvise DONTNEED after an fsync, which needs no root)

Last line: ``async_stall_ratio=<stall/sync> incremental_bytes_ratio=<new/full, frozen
embedding> incremental_all_trained=<new/full, nothing frozen> incremental_frozen_layers=<new/full,
fine-tune> restore_vs_torch=<xirang restore / torch.load, warm> restore_vs_mmap=<xirang restore /
torch.load(mmap=True) + load_state_dict, warm> restore_cold_vs_torch=<the same as the first,
cold> fsync_share=<fsync seconds / synchronous save seconds>``.
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


def build(
    vocab: int, width: int, layers: int, frozen: str = "embedding"
) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """``frozen``: "embedding" (the part that does not change), "none" (pre-training) or
    "lower" (a fine-tune: the embedding and the lower three quarters of the layers)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, width),
        *[torch.nn.Linear(width, width) for _ in range(layers)],
    )
    still = {"none": 0, "embedding": 1, "lower": 1 + 3 * layers // 4}[frozen]
    for module in list(model)[:still]:
        module.requires_grad_(False)
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


def incremental_ratio(root: Path, args: argparse.Namespace, frozen: str) -> float:
    """Bytes an incremental save writes after one optimizer step, over the checkpoint's size."""
    model, optim = build(args.vocab, args.width, args.layers, frozen)
    step(model, optim)
    saver = manager(root / f"incremental-{frozen}", model, optim, async_save=False)
    saver.save(1)
    step(model, optim)
    saver.save(2)
    second = saver.wait(raise_errors=True)
    return second.bytes_new / second.bytes_total


def drop_cache(path: Path) -> None:
    """Evict ``path`` (a file, or every file under a folder) from the page cache: fsync, so
    its pages are clean, then POSIX_FADV_DONTNEED. The next read comes from the disk."""
    for file in [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def load_mmap(path: Path, model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
    """torch.load(mmap=True): the tensors map the file; load_state_dict copies them in."""
    state = torch.load(path, weights_only=True, mmap=True)
    model.load_state_dict(state["model"])
    optim.load_state_dict(state["optim"])


def restores(root: Path, run: Path, args: argparse.Namespace, cold: bool) -> dict[str, float]:
    """Seconds of each restore, the files dropped from the page cache first when ``cold``."""
    plain = root / "plain.pt"
    sides = {  # each builds its restore (a checkpoint manager: outside the timing), then runs it
        "torch.load": lambda m, o: lambda: torch.load(plain, weights_only=True),
        "torch.load + load_state_dict": lambda m, o: lambda: load_plain(plain, m, o),
        "torch.load(mmap=True) + load_state_dict": lambda m, o: lambda: load_mmap(plain, m, o),
        "xirang restore": lambda m, o: manager(run, m, o).restore,
    }
    seconds = {}
    for name, prepare in sides.items():
        model, optim = build(args.vocab, args.width, args.layers)
        restore = prepare(model, optim)
        if cold:
            drop_cache(plain)
            drop_cache(run)
        else:
            restore()  # once, to have the files in the page cache
        seconds[name] = timed(restore)
    return seconds


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

        sync = manager(root / "sync", model, optim, async_save=False)
        sync_save = timed(lambda: sync.save(1))
        fsync_s = sync.wait(raise_errors=True).timings["fsync_s"]

        run = root / "async"
        asynchronous = manager(run, model, optim)
        first_stall = timed(lambda: asynchronous.save(1))  # allocates the staging buffers
        first = asynchronous.wait(raise_errors=True)
        step(model, optim)
        stall = timed(lambda: asynchronous.save(2))  # every later save: a copy into them
        second = asynchronous.wait(raise_errors=True)

        fresh_model, fresh_optim = build(args.vocab, args.width, args.layers)
        manager(run, fresh_model, fresh_optim).restore()
        same = same_state(model, optim, fresh_model, fresh_optim)
        rounds = [restores(root, run, args, cold) for cold in (False, True, False, True)]
        warm = {k: min(r[k] for r in rounds[0::2]) for k in rounds[0]}  # best of two each
        cold = {k: min(r[k] for r in rounds[1::2]) for k in rounds[0]}
        ratios = {f: incremental_ratio(root, args, f) for f in ("none", "lower")}

    mb = 1e6
    new, full = second.bytes_new / mb, second.bytes_total / mb
    background = first.timings["serialise_s"] + first.timings["store_s"]
    print(f"state {total / mb:.0f} MB, of which one step changes {changing / mb:.0f} MB")
    print(f"raw disk write         {rate / mb:8.0f} MB/s  ({total / rate:.3f} s for the state)")
    print(f"torch.save             {torch_save:8.3f} s")
    print(f"xirang save (sync)     {sync_save:8.3f} s  (of which fsync {fsync_s:.3f} s)")
    print(f"xirang async stall     {stall:8.3f} s  (first {first_stall:.3f}, bg {background:.3f})")
    print(
        f"incremental save       {new:8.1f} MB new of {full:.1f} MB "
        f"(changed {changing / mb:.1f} MB: {second.bytes_new / changing - 1:+.1%})"
    )
    print(
        f"incremental, every tensor trains: {ratios['none']:.3f} of the full size (saves "
        f"nothing); fine-tune, lower 3/4 frozen: {ratios['lower']:.3f}"
    )
    print(f"{'restore (best of 2)':42s} {'warm s':>8s} {'cold s':>8s}")
    for name in warm:
        print(f"{name:42s} {warm[name]:8.3f} {cold[name]:8.3f}")
    print(f"xirang restore: verified, loaded into model and optimizer; state equal: {same}")
    mine = "xirang restore"
    print(
        f"async_stall_ratio={stall / sync_save:.3f} "
        f"incremental_bytes_ratio={second.bytes_new / second.bytes_total:.3f} "
        f"incremental_all_trained={ratios['none']:.3f} "
        f"incremental_frozen_layers={ratios['lower']:.3f} "
        f"restore_vs_torch={warm[mine] / warm['torch.load']:.2f} "
        f"restore_vs_mmap={warm[mine] / warm['torch.load(mmap=True) + load_state_dict']:.2f} "
        f"restore_cold_vs_torch={cold[mine] / cold['torch.load']:.2f} "
        f"fsync_share={fsync_s / sync_save:.3f}"
    )


if __name__ == "__main__":
    main()
