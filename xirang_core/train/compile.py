"""``trainer.compile=true``: ``torch.compile`` per transformer block, as torchtitan does.

Each block of the family's ``parallelize.layers(model)`` is compiled in place
(``module.compile()``), so parameter names, state dicts and checkpoints are those of the eager
model. Strategies call :func:`compile_model` after tensor parallel and activation checkpointing
and before the data-parallel wrapper (FSDP2 or DDP), the order that composes; a family without
a parallelize plan is compiled whole. Identical blocks share one compiled graph.

:func:`compiler_problem` is the launching process's cheap check that a compiler backend can
work on the device at all, so a missing C++ compiler or Triton is one error before any worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from xirang_core.plugins import get_registry


def compile_model(model: nn.Module, config: dict[str, Any]) -> None:
    """Compile ``model``'s blocks in place when the run asks for it; otherwise nothing."""
    if not config["trainer"].get("compile", False):
        return

    spec = get_registry().spec("model", config["model"]["family"])
    if not spec.parallelize:
        model.compile()
        return
    plan = spec.load_parallelize()
    for layer in plan.layers(model).values():
        layer.compile()
    plan.compile_head(model)  # the output head and loss, if the family compiles them apart


@contextlib.contextmanager
def without_recompiling() -> Iterator[None]:
    """Inside, compiled blocks whose guards fail run eager rather than compile again. For
    evaluation: no gradients and eval mode fail the training graph's guards, so each compiled
    block (and the compiled head) compiled a second graph at the first evaluation, minutes at
    scale for a few held-out batches, and counted against dynamo's recompile limit. Code whose
    guards hold still runs compiled; without compiled code this changes nothing."""
    with torch.compiler.set_stance("eager_on_recompile"):
        yield


def compiler_problem(device_type: str) -> str | None:
    """Why inductor (torch.compile's default backend) cannot generate code for ``device_type``
    here, or None. Looks for the tools only; compiles nothing."""
    if device_type == "cpu":
        cxx = os.environ.get("CXX", "g++")
        if shutil.which(cxx) is None:
            return (
                f"inductor compiles CPU kernels with a C++ compiler, and '{cxx}' is not on PATH "
                f"(install g++, or point CXX at one)"
            )
    elif device_type in ("cuda", "rocm") and importlib.util.find_spec("triton") is None:
        return f"inductor generates {device_type} kernels with Triton, which is not installed"
    return None


def compiled_frames() -> int:
    """Frames dynamo has compiled in this process: a step during which it grew compiled."""
    from torch._dynamo.utils import counters

    return counters["frames"]["ok"]
