"""The checkpoint tools: ``xirang ckpt`` (list, verify, keep, export to safetensors, Hugging Face
or DCP, import a DCP folder) and ``xirang drill`` (kill workers, corrupt checkpoints, fail saves,
cut storage, then check that the run came back to the same weights), and the faults a drill
injects into the run's workers (:mod:`xirang_ckpt.inject`, through ``xirang_fault_injector``).

They read and write a run's checkpoints through :mod:`xirang.checkpoint`, as any tool of a third
party would; the kernel saves and restores checkpoints without them.
"""

from xirang import hookimpl
from xirang.specs import CommandSpec, FaultInjector, RunConfig


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


@hookimpl
def xirang_fault_injector(config: RunConfig, run_dir: str, rank: int) -> FaultInjector | None:
    """The drill's faults for worker ``rank`` (``None`` when the run has no drill section)."""
    drill = config.get("drill") or {}
    if not drill:
        return None
    from xirang_ckpt.inject import FaultInjector as Injector

    return Injector(drill, run_dir, rank)
