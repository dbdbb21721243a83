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


def test_a_token_file_or_store_readable_by_others_is_made_private_again(home) -> None:
    """What an earlier version or a careless copy left readable by every account (a job's
    among them) is mode 0600 once ``xirang pool serve`` opens it."""
    from xirang_service.pool.cli import _operator_token
    from xirang_service.pool.store import PoolStore

    token, store = home / "pool.db.operator-token", home / "pool.db"
    token.write_text("op-from-file\n")
    PoolStore(store).close()
    for path in (token, store):
        path.chmod(0o644)
    assert _operator_token(token) == ("op-from-file", str(token))
    PoolStore(store).close()
    for path in (token, store):
        assert path.stat().st_mode & 0o777 == 0o600, path
    fresh = home / "fresh.operator-token"
    _operator_token(fresh)
    assert fresh.stat().st_mode & 0o777 == 0o600
