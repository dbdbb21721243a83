"""Initial weights are drawn on several threads and equal the serial draws bit for bit."""

from __future__ import annotations

import threading
from typing import ClassVar

import pytest
import torch
from xirang_llama.model import Llama, LlamaConfig

from xirang_core.train.init import full_parameter, materialize

CFG = LlamaConfig(dim=32, n_layers=6, n_heads=4, n_kv_heads=2, ffn_dim=48, vocab_size=41)
SEED = 11


class ThreadRecordingLlama(Llama):
    """The Llama, noting which thread draws each parameter; its first two draws wait for
    each other, so they pass only when drawn at once (a serial draw breaks the barrier)."""

    threads: ClassVar[set[int]] = set()
    together: ClassVar[threading.Barrier] = threading.Barrier(2, timeout=10)
    calls: ClassVar[list[str]] = []

    def param_init(self, name: str, tensor: torch.Tensor, generator: torch.Generator) -> None:
        self.threads.add(threading.get_ident())
        self.calls.append(name)
        if len(self.calls) <= 2:
            self.together.wait()
        super().param_init(name, tensor, generator)


@pytest.mark.parametrize("meta", [False, True])
def test_parameters_are_drawn_on_threads_and_equal_serial_draws(
    meta: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off the calling thread, on more than one (a generator draws serially: threads are
    what runs the draws in parallel), each parameter equal to its own serial draw."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)  # this host may have 2 cores
    ThreadRecordingLlama.threads, ThreadRecordingLlama.calls = set(), []
    ThreadRecordingLlama.together.reset()
    torch.manual_seed(SEED)
    if meta:
        with torch.device("meta"):
            model = ThreadRecordingLlama(CFG)
        materialize(model, "cpu", SEED)
    else:
        model = ThreadRecordingLlama(CFG)
    assert len(ThreadRecordingLlama.threads) > 1
    assert threading.get_ident() not in ThreadRecordingLlama.threads
    for name, param in model.named_parameters():
        assert torch.equal(param, full_parameter(model, name, param, SEED)), name
