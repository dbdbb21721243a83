"""The training commands README.md and docs/*.md show (``Short`` in the docs test's table) run
as written, each shortened to two steps by the docs test's own overrides.

They run here rather than in ``test_documented_commands.py`` so that pytest-xdist gives them a
worker of their own: that module shares one with the Slurm tests. Each distinct command runs
once, in a workspace of its own like that module's (a fresh ``XIRANG_HOME``, the small corpus,
one quick run); a command shown twice is checked against each place's output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Prepared
from tests.docs.collect import DocCommand
from tests.docs.test_documented_commands import (
    COMMANDS,
    TABLE,
    Short,
    _id,
    _newest_run,
    _shell,
    check_commands,
    mismatch,
    newcomers_folder,
    shortened,
)

RUNS = [c for c in COMMANDS if isinstance(TABLE.get(c.text), Short)]

#: what each distinct command printed, shortened, for the places that show it again
_PRINTED: dict[str, str] = {}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, prepared_home: Prepared) -> Path:
    """The newcomer's folder, with the quick run exported as a Hugging Face folder,
    ``hf-model``: the ``DIR`` the docs' ``model=hf`` and ``tokenizer=hf`` commands read."""
    work = newcomers_folder(tmp_path_factory, prepared_home)
    done = _shell(f"xirang ckpt export --format hf {_newest_run(work)} hf-model", work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work


@pytest.mark.slow
@pytest.mark.parametrize("command", RUNS, ids=_id)
def test_a_documented_training_command_runs(command: DocCommand, workspace: Path) -> None:
    if command.text in _PRINTED:
        missing = mismatch(command.output, _PRINTED[command.text], command.figures)
        assert not missing, f"the docs show {missing!r}; it printed {_PRINTED[command.text]}"
        return
    entry = TABLE[command.text]
    assert isinstance(entry, Short)
    texts = tuple(shortened(t, entry.overrides) for t in entry.commands or (command.text,))
    _PRINTED[command.text] = check_commands(command, texts, workspace)


def test_a_shortened_command_keeps_its_choices() -> None:
    assert shortened("python -m xirang trainer.nproc=2 parallel=ddp") == (
        "python -m xirang trainer.nproc=2 parallel=ddp trainer.max_steps=2 trainer.sample_tokens=0"
    )
    assert shortened("python -m xirang -m a=1,2 trainer.max_steps=20 b=3") == (
        "python -m xirang -m a=1,2 trainer.max_steps=2 b=3 trainer.sample_tokens=0"
    )
