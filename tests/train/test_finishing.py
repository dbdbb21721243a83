"""After the last step a run says what it still does (final checkpoint, validation, sample,
report) and then how long each took, instead of minutes of silence after a full progress bar."""

from __future__ import annotations

import re

from tests.conftest import ONE_LAYER_GPT


def test_the_end_of_a_run_is_announced_and_timed(run_xirang) -> None:
    done = run_xirang("trainer.max_steps=2", "trainer.sample_tokens=5", *ONE_LAYER_GPT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    [said] = [i for i, line in enumerate(lines) if line.startswith("xirang: training done;")]
    assert "scoring 8 held-out batches, sampling 5 tokens" in lines[said]
    [timed] = [line for line in lines[said:] if line.startswith("xirang: finished in")]
    parts = re.findall(r"(\w+) [\d.]+ s", timed.split("(", 1)[1])
    assert parts == ["checkpoint", "validation", "sample", "report"]
