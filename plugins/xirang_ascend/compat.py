"""Which torch, torch_npu and CANN combinations run Ascend NPUs, with exact remedies.

torch reaches Ascend only through the torch_npu adapter, whose releases are built against one
torch release each (torch_npu ``2.1.0.post3`` for torch ``2.1.0``), and torch_npu loads the CANN
runtime, whose environment ``set_env.sh`` provides.
"""

from __future__ import annotations

from dataclasses import dataclass

from xirang.devices import NodeReading, TorchBuild, blocker, caveat, short, version_tuple
from xirang.specs import HealthFinding

SET_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"


@dataclass(frozen=True)
class TorchNpu:
    """torch_npu as imported here: its version, or why it failed to import; what it sees."""

    version: str = ""
    import_error: str = ""
    available: bool = False
    count: int = 0


def check(
    node: NodeReading, build: TorchBuild, npu: TorchNpu, cann_home: str
) -> list[HealthFinding]:
    base = short(version_tuple(build.version))
    if not npu.version:
        how = f"pip install torch-npu=={base}  (torch_npu releases follow torch releases)"
        if npu.import_error and "No module named" not in npu.import_error:
            return [
                blocker(
                    f"torch_npu is installed but fails to import ({npu.import_error}); load "
                    f"the CANN environment first: source {SET_ENV}"
                )
            ]
        return [blocker(f"torch_npu is not installed, so torch cannot use the NPUs: {how}")]
    findings = []
    built_for = short(version_tuple(npu.version))
    if version_tuple(npu.version) != version_tuple(build.version):
        findings.append(
            blocker(
                f"torch_npu {npu.version} is built for torch {built_for} but torch is "
                f"{build.version}: pip install torch-npu=={base} (or torch=={built_for})"
            )
        )
    if not cann_home:
        findings.append(
            caveat(
                f"the CANN environment is not loaded (ASCEND_TOOLKIT_HOME is unset); "
                f"source {SET_ENV} before training"
            )
        )
    if not npu.available and not findings:
        findings.append(
            blocker(
                f"npu-smi lists {len(node.usable)} NPU(s) but torch_npu sees none; check "
                f"ASCEND_RT_VISIBLE_DEVICES and that /dev/davinci* are mounted into this container"
            )
        )
    return findings
