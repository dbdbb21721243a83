"""The secrets the pool hands out: the operator token and each project's token.

A token is ``xrp_`` and 32 URL-safe characters (24 random bytes). The prefix keeps a token from
starting with ``-``, which ``xirang pool --token TOKEN`` would read as an option (one in 32 of
the bare ``secrets.token_urlsafe`` strings does), and lets secret scanners recognise one.
"""

from __future__ import annotations

import secrets

#: what every token the pool makes begins with
PREFIX = "xrp_"


def new_token() -> str:
    """A fresh token: :data:`PREFIX` and 24 random bytes, URL-safe."""
    return PREFIX + secrets.token_urlsafe(24)
