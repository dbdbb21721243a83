"""The checkpoint tools: ``xirang ckpt`` (list, verify, keep, export to safetensors, Hugging Face
or DCP, import a DCP folder) and ``xirang drill`` (kill workers, corrupt checkpoints, fail saves,
cut storage, then check that the run came back to the same weights).

They read and write a run's checkpoints through :mod:`xirang.checkpoint`, as any tool of a third
party would; the kernel saves and restores checkpoints without them.
"""

from xirang import hookimpl
from xirang.specs import CommandSpec


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="ckpt",
            target="xirang_ckpt.cli:main",
            description="list, verify, keep and export (safetensors) a run's checkpoints",
        ),
        CommandSpec(
            name="drill",
            target="xirang_ckpt.drill:main",
            description="fault drills: kill workers, corrupt checkpoints, fail saves; compare",
        ),
    ]
