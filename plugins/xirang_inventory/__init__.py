"""``xirang devices``: what each installed device backend finds on this machine (inventory,
topology, health, calibration), the tool behind "is this host usable, and how fast". Registered
through the same hook a third-party command uses."""

from xirang import hookimpl
from xirang.specs import CommandSpec


@hookimpl
def xirang_commands() -> list[CommandSpec]:
    return [
        CommandSpec(
            name="devices",
            target="xirang_inventory.command:main",
            description="inventory, topology, health and calibration of this machine's devices",
        )
    ]
