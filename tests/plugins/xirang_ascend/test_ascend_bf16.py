"""bf16 on Ascend is a property of the SoC: where torch_npu has no ``is_bf16_supported`` (older
releases), the first-generation 910 (Atlas 800 9000) must not be taken to compute in bf16."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
from ascend_replay import backend
from xirang_ascend.backend import soc_has_bf16


def _torch_npu(monkeypatch, **npu) -> None:
    """A torch_npu module whose ``npu`` namespace has only what is given; importing torch_npu
    registers it as ``torch.npu``, as the real one does."""
    import torch

    namespace = SimpleNamespace(**npu)
    monkeypatch.setitem(sys.modules, "torch_npu", SimpleNamespace(npu=namespace))
    monkeypatch.setattr(torch, "npu", namespace, raising=False)


@pytest.mark.parametrize(
    ("box", "bf16"), [("atlas_800t_a2", True), ("atlas_800_9000_faulty", False)]
)
def test_without_is_bf16_supported_the_soc_decides(monkeypatch, box: str, bf16: bool) -> None:
    _torch_npu(monkeypatch)
    assert backend(box).supports_dtype("bfloat16") is bf16


def test_torch_npus_own_answer_wins(monkeypatch) -> None:
    _torch_npu(monkeypatch, is_bf16_supported=lambda: False)
    assert backend("atlas_800t_a2").supports_dtype("bfloat16") is False


def test_soc_name_from_torch_npu_when_it_has_one(monkeypatch) -> None:
    _torch_npu(monkeypatch, get_soc_name=lambda: "Ascend910B4")
    assert backend("atlas_800_9000_faulty").supports_dtype("bfloat16") is True


@pytest.mark.parametrize(
    ("soc", "bf16"),
    [
        ("Ascend910B3", True),
        ("910B1", True),
        ("Ascend910_9392", True),
        ("Ascend910A", False),
        ("Ascend910ProB", False),  # first generation despite the B
        ("Ascend910PremiumA", False),
        ("Ascend 910", False),
        ("Ascend310P3", False),
    ],
)
def test_socs_with_bf16(soc: str, bf16: bool) -> None:
    assert soc_has_bf16(soc) is bf16
