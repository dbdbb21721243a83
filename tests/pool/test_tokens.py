"""Every token the pool makes passes as ``xirang pool --token TOKEN``: a bare random URL-safe
string starts with ``-`` one time in 32, and argparse then took it for an option (CI met it)."""

from __future__ import annotations

from xirang_service.pool.cli import _parser
from xirang_service.pool.tokens import PREFIX, new_token


def test_a_new_token_parses_as_the_value_of_token() -> None:
    tokens = {new_token() for _ in range(400)}
    assert len(tokens) == 400  # random, never repeated
    for token in tokens:
        assert token.startswith(PREFIX) and len(token) == len(PREFIX) + 32
        assert _parser().parse_args(["--token", token, "jobs"]).token == token
