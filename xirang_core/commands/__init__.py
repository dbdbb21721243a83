"""The core's own subcommands, registered through the same hook a plugin would use."""

from xirang_core.hookspecs import hookimpl
from xirang_core.specs import CommandSpec


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="plugins",
            target="xirang_core.commands.plugins:main",
            description="list plugins, what they register, and what is available here",
        ),
    ]
