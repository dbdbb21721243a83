"""The communication plugin (``comm=<option>``): collective backends keyed by device type and
gradient-sync options for DDP, each counted (bytes on the wire) and timed (hidden communication).

Plain all-reduce over a named backend: gloo, nccl, rccl, hccl. Gradient options that follow the
device's backend: fp16, bf16, powersgd, topk, hierarchical, localsgd, diloco. Across device
types (one run over NVIDIA, AMD and CPU ranks): mixed.
"""

from xirang import conf_folder, hookimpl
from xirang.specs import CommandSpec, CommBackendSpec

_ANY = ("cpu", "cuda", "rocm", "ascend", "hpu")

#: (name, target, schema, description, device types)
_OPTIONS = (
    (
        "gloo",
        "plain:Gloo",
        "settings:CommSettings",
        "gloo process groups; plain averaged all-reduce",
        ("cpu", "cuda", "rocm"),
    ),
    (
        "nccl",
        "plain:Nccl",
        "settings:CommSettings",
        "NCCL process groups; plain averaged all-reduce",
        ("cuda", "rocm"),
    ),
    (
        "rccl",
        "plain:Rccl",
        "settings:CommSettings",
        "ROCm's RCCL (torch's nccl); plain all-reduce",
        ("rocm",),
    ),
    (
        "hccl",
        "plain:Hccl",
        "settings:CommSettings",
        "Ascend HCCL via torch_npu; plain all-reduce",
        ("ascend",),
    ),
    (
        "fp16",
        "compress:Fp16",
        "settings:CommSettings",
        "torch's fp16_compress_hook: gradients all-reduced in fp16 (half bytes)",
        _ANY,
    ),
    (
        "bf16",
        "compress:Bf16",
        "settings:CommSettings",
        "torch's bf16_compress_hook: gradients all-reduced in bf16 (half bytes)",
        _ANY,
    ),
    (
        "powersgd",
        "powersgd:PowerSGD",
        "settings:PowerSGDSettings",
        "torch's powerSGD_hook: rank-r factors, error feedback, warm start",
        _ANY,
    ),
    (
        "topk",
        "topk:TopK",
        "settings:TopKSettings",
        "top-k sparsification with error feedback",
        _ANY,
    ),
    (
        "hierarchical",
        "hierarchical:Hierarchical",
        "settings:HierarchicalSettings",
        "reduce in each link group, all-reduce across groups, broadcast back",
        _ANY,
    ),
    (
        "mixed",
        "mixed:MixedTypes",
        "settings:CommSettings",
        "several device types: each type reduces with its own library, leaders over gloo",
        _ANY,
    ),
    (
        "localsgd",
        "periodic:PeriodicSync",
        "settings:PeriodicSettings",
        "torch's post-local SGD: parameters averaged every H steps, no gradients sent",
        _ANY,
    ),
    (
        "diloco",
        "periodic:DiLoCo",
        "settings:DiLoCoSettings",
        "DiLoCo: outer Nesterov step on the averaged change every H steps",
        _ANY,
    ),
)


@hookimpl
def xirang_comm_backends() -> list[CommBackendSpec]:
    return [
        CommBackendSpec(
            name=name,
            target=f"xirang_comm.{target}",
            schema=f"xirang_comm.{schema}",
            description=description,
            device_types=devices,
        )
        for name, target, schema, description, devices in _OPTIONS
    ]


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="bench",
            target="xirang_comm.bench:main",
            description="benchmarks: `xirang bench comm` (collectives, scaling, cost model)",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
