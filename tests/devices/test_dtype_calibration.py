"""The CPU's bf16 matmul figure is measured like its fp32 one: dtypes take turns window by
window, so a burst of other work on a shared host cannot cover one dtype's whole measurement
(bf16, measured last, once read 0.001 TFLOP/s here and stayed cached)."""

from __future__ import annotations

import pytest
import torch
from xirang_cpu.backend import CALIBRATION_MATMUL_SIZE, CpuBackend

from xirang_core.devices.calibration import measure_matmul_tflops


@pytest.mark.skipif(
    not torch.ops.mkldnn._is_mkldnn_bf16_supported(), reason="this CPU has no native bf16 matmul"
)
def test_bf16_peak_is_a_plausible_fraction_of_fp32s() -> None:
    tflops = measure_matmul_tflops(
        torch.device("cpu"), ["float32", "bfloat16"], CALIBRATION_MATMUL_SIZE, seconds=0.6
    )
    # native bf16 (AVX512-BF16, AMX) runs at one to several times fp32's rate; a figure far
    # below it is the measurement failing, as 0.001 TFLOP/s against 0.2 was
    assert tflops["bfloat16"] >= 0.3 * tflops["float32"] > 0, tflops


def test_the_cpu_computes_in_fp32_bf16_and_fp16() -> None:
    backend = CpuBackend()
    assert all(backend.supports_dtype(n) for n in ("float32", "bfloat16", "float16"))
    assert not backend.supports_dtype("float8_e4m3fn")
