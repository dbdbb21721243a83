"""Vendors' datasheet peaks of accelerators: what MFU is reported against where it is known.

MFU as PaLM and torchtitan report it is model FLOPs over the device's dense peak for the dtype
computed in. A measured matmul rate moves with the load, the matrix size and the driver (the
same H200 read 0.656 of its datasheet at 4096³ and more at 8192³), so for a device the table
names, the datasheet is the fixed ceiling; a CPU, or an accelerator the table does not name, is
measured (:mod:`xirang.devices.calibration`).
"""

from __future__ import annotations

#: dense bf16 tensor TFLOP/s and memory GB/s from the vendors' datasheets, by a part of the
#: device's name; the first match wins, so a name that contains another comes before it
DATASHEET: tuple[tuple[str, float, float], ...] = (
    ("GH200", 989.0, 4000.0),
    ("H200 NVL", 835.0, 4800.0),
    ("H200", 989.0, 4800.0),
    ("H100 NVL", 835.0, 3900.0),
    ("H100 PCIe", 756.0, 2000.0),
    ("H100", 989.0, 3350.0),
    ("B200", 2250.0, 8000.0),
    ("A100-SXM4-80GB", 312.0, 2039.0),
    ("A100 80GB PCIe", 312.0, 1935.0),
    ("A100", 312.0, 1555.0),
    ("L40S", 362.0, 864.0),
    ("L40", 181.0, 864.0),
    ("L4", 121.0, 300.0),
    ("RTX 6000 Ada", 364.0, 960.0),
    ("RTX 4090", 165.0, 1008.0),
    ("A10", 125.0, 600.0),
    ("A40", 150.0, 696.0),
    ("MI300X", 1307.4, 5300.0),
)

#: a dtype's dense tensor peak as a share of bf16's, on every device of the table: fp16 runs
#: at bf16's rate, TF32 (an fp32 run's matmuls on CUDA) at half of it
SHARE_OF_BF16 = {"bfloat16": 1.0, "float16": 1.0, "tfloat32": 0.5}


def datasheet(model: str) -> tuple[float, float] | None:
    """(dense bf16 TFLOP/s, memory GB/s) of the device named ``model``, if the table has it."""
    for part, tflops, gbps in DATASHEET:
        if part.lower() in model.lower():
            return tflops, gbps
    return None


def datasheet_tflops(model: str, dtype: str) -> float | None:
    """The dense peak TFLOP/s of ``model`` in ``dtype`` (a calibration's dtype name), or None
    where the table does not know the device or the dtype (plain float32 without tensor
    cores is left to measurement)."""
    sheet = datasheet(model)
    if sheet is None or dtype not in SHARE_OF_BF16:
        return None
    return sheet[0] * SHARE_OF_BF16[dtype]
