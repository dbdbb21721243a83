"""A gradient comm option on one worker has no gradients to exchange: the run says so."""

from __future__ import annotations

import pytest

from tests.conftest import ONE_LAYER_GPT, QUICK


@pytest.mark.slow
def test_a_comm_option_on_one_worker_warns_that_it_does_nothing(run_xirang) -> None:
    result = run_xirang("comm=fp16", *ONE_LAYER_GPT, *QUICK)
    assert result.returncode == 0, result.stderr[-2000:]
    output = " ".join((result.stdout + result.stderr).split())  # Hydra logs to stdout
    assert "comm=fp16 changes how workers exchange gradients; with one worker" in output
    assert output.count("comm=fp16 changes") == 1  # one line, not one per step
