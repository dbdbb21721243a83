"""What ``xirang pool status|queue|jobs`` print at 80 columns, and what a missing token says."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pool.test_service import OPERATOR, Clock, _start
from tests.test_narrow_terminal import fits
from xirang_service.pool.cli import main
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError


@pytest.fixture
def busy_pool(tmp_path: Path, cluster_file: Path, monkeypatch: pytest.MonkeyPatch):
    """A real service over HTTP with one running and two queued jobs, read at 80 columns."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("XIRANG_POOL_TOKEN", raising=False)
    service, url = _start(str(tmp_path / "pool.db"), cluster_file, Clock())
    operator = PoolClient(url, OPERATOR)
    for cards, name in ((8, "pretrain-llama-long-name"), (4, "finetune"), (2, "eval")):
        operator.submit(project="nlp", cards=cards, name=name, priority="high")
    yield url
    service._server.shutdown()
    service.store.close()


def test_status_is_lines_and_tables_not_raw_dicts(busy_pool: str, capsys) -> None:
    assert main(["--url", busy_pool, "--token", OPERATOR, "status"]) == 0
    out = capsys.readouterr().out
    assert "{" not in out and "'" not in out, out  # no Python dict or list reprs
    assert "capacity" in out and "free" in out and "guaranteed" in out
    assert "drained: none" in out and "queued: 2" in out
    assert fits(out), out


@pytest.mark.parametrize("view", [["queue"], ["jobs"], ["jobs", "--state", "queued"]])
def test_job_tables_fit_80_columns(busy_pool: str, view: list[str], capsys) -> None:
    assert main(["--url", busy_pool, "--token", OPERATOR, *view]) == 0
    out = capsys.readouterr().out
    assert fits(out), out
    assert "finetune" in out and "state" in out


def test_a_missing_token_says_where_tokens_come_from(busy_pool: str) -> None:
    with pytest.raises(PoolError) as err:
        main(["--url", busy_pool, "status"])
    message = str(err.value)
    assert "XIRANG_POOL_TOKEN" in message and "xirang pool quota" in message
    assert "XIRANG_POOL_OPERATOR_TOKEN" in message and ".operator-token" in message


def test_control_characters_in_job_names_reach_the_terminal_escaped(
    busy_pool: str, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant's job name cannot clear the operator's screen, retitle the window or hide
    text (ANSI escapes, carriage returns, bidi overrides): ``xirang pool jobs`` shows them as
    escapes; rich markup in a name is shown as written."""
    name = "evil\x1b[2J\x1b]0;owned\x07\rfake\u202egnp.exe[bold]x"
    PoolClient(busy_pool, OPERATOR).submit(project="nlp", cards=1, name=name)
    monkeypatch.setenv("COLUMNS", "400")  # the name on one line, not folded
    assert main(["--url", busy_pool, "--token", OPERATOR, "jobs"]) == 0
    out = capsys.readouterr().out
    for control in ("\x1b", "\x07", "\r", "\u202e"):
        assert control not in out
    assert "evil\\x1b[2J\\x1b]0;owned\\x07\\rfake\\u202egnp.exe[bold]x" in out


def test_status_at_80_columns_keeps_every_project_whole_and_says_how_borrowing_counts(
    busy_pool: str, capsys
) -> None:
    """Issue 53: at 80 columns the project column shrank to nothing, and ``borrowed 8``
    against a guarantee of 4 went unexplained. Every value stays whole (columns that do not
    fit are named), and the status says how borrowing is counted."""
    long = "speech-recognition-research"
    quota = {"guaranteed": 1, "borrow_limit": 1, "team": "audio-and-speech-group"}
    PoolClient(busy_pool, OPERATOR).call("PUT", f"/v1/projects/{long}", quota)
    assert main(["--url", busy_pool, "--token", OPERATOR, "status"]) == 0
    out = capsys.readouterr().out
    assert fits(out), out
    assert long in out.split() and "nlp" in out.split()
    head = next(line for line in out.splitlines() if "project" in line).split()
    assert {"guaranteed", "used", "borrowed"} <= set(head), out  # the figures stay in view
    words = " ".join(out.split())
    assert "each job counted whole (a 2-card job over a 1-card guarantee: borrowed 2)" in words
