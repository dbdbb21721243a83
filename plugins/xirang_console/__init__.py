"""The ``xirang console`` command: the web console over the pool and the costs."""

from xirang import hookimpl
from xirang.specs import CommandSpec


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="console",
            target="xirang_service.console.cli:main",
            description="web console: capacity, health, queue, quotas, costs; /metrics",
        )
    ]
