"""The gloo collective backend (``comm=gloo``): CPU tensors, any machine."""

from pathlib import Path

from xirang import hookimpl
from xirang.specs import CommBackendSpec


@hookimpl
def xirang_comm_backends() -> list[CommBackendSpec]:
    return [
        CommBackendSpec(
            name="gloo",
            target="xirang_gloo.backend:Gloo",
            description="gloo process groups; plain gradient all-reduce",
            device_types=("cpu",),
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return [f"file://{Path(__file__).parent / 'conf'}"]
