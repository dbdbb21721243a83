"""The ``xirang`` command line: Hydra overrides train; a first word names a subcommand.

    xirang hydra overrides          train (``python -m xirang [overrides]`` is the same)
    xirang                          the subcommands (bare ``python -m xirang`` trains the default)
    xirang plugins [--json]         what is installed and available
    xirang <command> ...            any command a plugin registers (``xirang --commands``)

Start-up stays light: torch and Hydra are imported only when a run needs them.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from typing import Any

from xirang_core.devices.cores import omp_defaults
from xirang_core.errors import XirangError
from xirang_core.terminal import help_text, report_error

__all__ = ["help_text", "main", "report_error"]  # help_text: the tools' name for it, too

USAGE = """usage: xirang <command> [args]      (xirang <command> --help for its own)
       python -m xirang [overrides]  train (bare: the embedded default)

commands:"""


def main(argv: list[str] | None = None, bare_trains: bool = False) -> int:
    """The ``xirang`` command; ``python -m xirang`` passes ``bare_trains`` (a bare ``xirang``
    typed to see what it does lists the commands rather than starting a 300-step run)."""
    args = list(sys.argv[1:] if argv is None else argv)
    omp_defaults(os.environ)  # before anything loads torch: its OpenMP reads them once
    try:
        if args == ["--commands"] or (not args and not bare_trains):
            if not args:
                print(USAGE)
            return _list_commands()
        if args and _looks_like_command(args[0]):
            return _run_command(args[0], args[1:])
        return _train(args)
    except XirangError as exc:
        report_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C before training began (a run's own is a RunInterrupted)
        print("xirang: interrupted before training started; nothing to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `xirang ... | head` closed the pipe: stop quietly, as cat does
        _silence_stdout()
        return 141


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of the closed pipe does not
    print a second traceback on the way out."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _looks_like_command(word: str) -> bool:
    return "=" not in word and not word.startswith(("-", "+", "~"))


def _run_command(name: str, argv: list[str]) -> int:
    from xirang_core.errors import ConfigError
    from xirang_core.plugins import get_registry

    registry = get_registry()
    if name not in registry.names("command"):
        raise ConfigError(
            f"unknown command '{name}'. Commands: {', '.join(registry.names('command'))}; "
            f"or give Hydra overrides (key=value, group=option) to train."
        )
    return int(registry.load("command", name)(argv) or 0)


def _list_commands() -> int:
    from xirang_core.plugins import get_registry

    registry = get_registry()
    width = shutil.get_terminal_size().columns  # COLUMNS, the terminal's, else 80
    for name in registry.names("command"):
        print(
            textwrap.fill(
                registry.spec("command", name).description,
                width,
                initial_indent=f"  {name:12s} ",
                subsequent_indent=" " * 15,
            )
        )
    return 0


def _train(args: list[str]) -> int:
    import hydra

    from xirang_core.config import check_overrides, register_with_hydra
    from xirang_core.plugins import get_registry
    from xirang_core.train import torchrun

    found = torchrun.world()
    if found and found.rank != 0:  # rank 0 composes the run; this rank trains in it
        torchrun.follow(found)
        return 0
    if found:
        args = torchrun.adopt(args, found)
    registry = get_registry()
    check_overrides(args, registry)
    register_with_hydra(registry)

    @hydra.main(version_base="1.3", config_path="pkg://xirang_conf", config_name="config")
    def app(cfg: Any) -> float:
        """One run; Hydra's sweeper gets its ``sweep.objective`` (summary.json has the rest).
        The config is checked before the run's modules load torch and the data stack, so a bad
        one is refused without paying for them."""
        from xirang_core.config import validate
        from xirang_core.sweep.objective import objective_value

        try:
            validate(cfg, registry)
            from xirang_core.run import launch

            return objective_value(launch(cfg), cfg.sweep)
        except XirangError as exc:  # inside Hydra: report plainly instead of its traceback
            report_error(exc)
            raise SystemExit(exc.exit_code) from None

    saved = sys.argv
    sys.argv = [saved[0] if saved else "xirang", *args]
    try:
        app()
    finally:
        sys.argv = saved
    return 0
