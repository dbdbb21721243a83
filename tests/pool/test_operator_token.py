"""The operator's commands find the operator's token as README's pool block uses them: after
``xirang pool serve`` wrote it beside its state, with a project's token exported."""

from __future__ import annotations

import argparse

import pytest

from xirang_service.pool.cli import OPERATOR_TOKEN_ENV, _operator_client


@pytest.fixture
def home(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XIRANG_HOME", str(tmp_path))
    monkeypatch.setenv("XIRANG_POOL_TOKEN", "nlp-token")  # `export XIRANG_POOL_TOKEN=...`
    monkeypatch.delenv(OPERATOR_TOKEN_ENV, raising=False)
    return tmp_path


def args(token: str = "") -> argparse.Namespace:
    return argparse.Namespace(url="http://127.0.0.1:1", token=token)


def test_the_file_pool_serve_wrote_beats_an_exported_project_token(home, monkeypatch) -> None:
    (home / "pool.db.operator-token").write_text("op-from-file\n")
    assert _operator_client(args()).token == "op-from-file"
    monkeypatch.setenv(OPERATOR_TOKEN_ENV, "op-from-env")
    assert _operator_client(args()).token == "op-from-env"
    assert _operator_client(args("given")).token == "given"


def test_without_an_operator_token_the_project_token_is_sent(home) -> None:
    """The service then answers that the operator's token is needed (tests/pool)."""
    assert _operator_client(args()).token == "nlp-token"
