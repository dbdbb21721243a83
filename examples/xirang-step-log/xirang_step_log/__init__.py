"""An observer: every logged step's loss and learning rate in ``<run dir>/steps.csv``.

Observers implement run-event hooks (see :class:`xirang.specs.Observer`); they register nothing.
``@optional``: a CSV that cannot be written (a full disk) warns, and training goes on.
"""

from pathlib import Path

from xirang import hookimpl, optional
from xirang.specs import RunConfig, WorkerContext

FILE = "steps.csv"


@hookimpl
def xirang_on_run_start(ctx: WorkerContext, config: RunConfig) -> None:
    if ctx.is_main:  # every worker calls run_start; one file per run
        Path(ctx.run_dir, FILE).write_text(f"# {config['model']['name']}\nstep,loss,lr\n")


@hookimpl
@optional
def xirang_on_step_end(ctx: WorkerContext, step: int, metrics: dict[str, float]) -> None:
    with Path(ctx.run_dir, FILE).open("a") as out:  # only the main worker calls step_end
        out.write(f"{step},{metrics['loss']},{metrics['lr']}\n")
