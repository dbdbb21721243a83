"""The ``xirang`` command line: Hydra overrides train; a first word names a subcommand.

    xirang hydra overrides          train (``python -m xirang [overrides]`` is the same)
    xirang                          the subcommands (bare ``python -m xirang`` trains the default)
    xirang plugins [--json]         what is installed and available
    xirang --version                the installed release
    xirang <command> ...            any command a plugin registers (``xirang --commands``)

Start-up stays light: torch and Hydra are imported only when a run needs them.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from typing import Any

from xirang_core import installed_version
from xirang_core.devices.cores import omp_defaults
from xirang_core.errors import ConfigError, XirangError
from xirang_core.plugins import get_registry
from xirang_core.sweep.objective import objective_value
from xirang_core.terminal import help_text, report_error

__all__ = ["help_text", "main", "report_error"]  # help_text: the tools' name for it, too

#: where the run's config lives, and the job name Hydra records for it (``hydra.job.name``)
CONFIG_PATH, CONFIG_NAME, TASK_NAME = "pkg://xirang_conf", "config", "cli"

USAGE = """usage: xirang <command> [args]      (xirang <command> --help for its own)
       python -m xirang [overrides]  train (bare: the embedded default)

commands:"""


def main(argv: list[str] | None = None, bare_trains: bool = False) -> int:
    """The ``xirang`` command; ``python -m xirang`` passes ``bare_trains`` (a bare ``xirang``
    typed to see what it does lists the commands rather than starting a 300-step run)."""
    args = list(sys.argv[1:] if argv is None else argv)
    omp_defaults(os.environ)  # before anything loads torch: its OpenMP reads them once
    try:
        if args in (["--version"], ["-V"]):
            print(f"xirang {installed_version()}")
            return 0
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
    registry = get_registry()
    if name not in registry.names("command"):
        raise ConfigError(
            f"unknown command '{name}'. Commands: {', '.join(registry.names('command'))}; "
            f"or give Hydra overrides (key=value, group=option) to train."
        )
    return int(registry.load("command", name)(argv) or 0)


def _list_commands() -> int:
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
    # Hydra and the training stack load only for a run: `xirang plugins` must start fast
    from xirang_core.config import check_options, check_overrides, register_with_hydra
    from xirang_core.train import torchrun

    found = torchrun.world()
    if found and found.rank != 0:  # rank 0 composes the run; this rank trains in it
        torchrun.follow(found)
        return 0
    if found:
        args = torchrun.adopt(args, found)
    registry = get_registry()
    if _plain_run(args):
        check_options(args, registry)
        register_with_hydra(registry)
        if _run_composed_once(args, registry):
            return 0
    check_overrides(args, registry)
    register_with_hydra(registry)
    _run_with_hydra_main(args, registry)
    return 0


def _plain_run(args: list[str]) -> bool:
    """One run with no Hydra flag (``-m``, ``--cfg``, ``--help``...) and no ``+key``: it is
    composed once, here. Anything else goes through Hydra's own entry point."""
    return not any(arg.startswith(("-", "+")) for arg in args)


def _run_composed_once(args: list[str], registry: Any) -> bool:
    """Compose the run once and train it in Hydra's job (its output folder, logging and
    ``.hydra`` record, as ``@hydra.main`` would make them); False when the command line is
    not a single run (a sweep, or Hydra's own error to say). ``@hydra.main`` would compose
    the same config twice more: once to learn the mode, once to run it."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_automatic_config_search_path
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.utils import run_job
    from hydra.errors import HydraException
    from hydra.types import HydraContext, RunMode

    from xirang_core.config import check_keys_of

    GlobalHydra.instance().clear()
    search_path = create_automatic_config_search_path(__file__, None, CONFIG_PATH)
    hydra = Hydra.create_main_hydra2(task_name=TASK_NAME, config_search_path=search_path)
    try:
        cfg = hydra.compose_config(
            CONFIG_NAME, list(args), run_mode=RunMode.RUN, with_log_configuration=True
        )
    except HydraException:
        check_keys_of(args, registry)  # a typo: its own message, from a second composition
        return False  # a sweep without -m, or another mistake only Hydra can name
    if cfg.hydra.mode not in (None, RunMode.RUN):  # the config itself asks for a sweep
        return False
    cfg.hydra.mode = RunMode.RUN
    callbacks = Callbacks(cfg)
    callbacks.on_run_start(config=cfg, config_name=CONFIG_NAME)
    context = HydraContext(config_loader=hydra.config_loader, callbacks=callbacks)
    try:
        job = run_job(_task(registry), cfg, "hydra.run.dir", None, hydra_context=context)
    except OSError as exc:  # the run's own errors are in job.return_value: this is Hydra's set-up
        raise _unwritable_run_dir(exc) from None
    callbacks.on_run_end(config=cfg, config_name=CONFIG_NAME, job_return=job)
    _ = job.return_value  # raises what the run raised
    return True


def _unwritable_run_dir(exc: OSError) -> ConfigError:
    """Hydra could not make the run directory (or write its ``.hydra`` record and log into
    it): one line naming the folder and why, not the traceback of a ``mkdir``."""
    where = f" {exc.filename}" if exc.filename else ""
    return ConfigError(
        f"hydra.run.dir: cannot create or write the run directory{where} "
        f"({exc.strerror or exc}); name a folder this user can write, e.g. "
        "hydra.run.dir=outputs/my-run"
    )


def _run_with_hydra_main(args: list[str], registry: Any) -> None:
    """Sweeps (``-m``) and Hydra's flags: Hydra's own entry point with the same task."""
    import hydra

    app = hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name=CONFIG_NAME)(
        _task(registry)
    )
    saved = sys.argv
    sys.argv = [saved[0] if saved else "xirang", *args]
    try:
        app()
    finally:
        sys.argv = saved


def _task(registry: Any) -> Callable[[Any], float]:
    """One run; Hydra's sweeper gets its ``sweep.objective`` (summary.json has the rest)."""

    def run(cfg: Any) -> float:
        """The config is checked (once) before the run's modules load torch and the data
        stack, so a bad one is refused without paying for them."""
        from xirang_core.config import validate  # Hydra's: only once a run is asked for

        try:
            config = validate(cfg, registry)
            from xirang_core.run import launch  # torch: only for a config that passed

            return objective_value(launch(cfg, config), cfg.sweep)
        except XirangError as exc:  # inside Hydra: report plainly instead of its traceback
            report_error(exc)
            raise SystemExit(exc.exit_code) from None

    return run
