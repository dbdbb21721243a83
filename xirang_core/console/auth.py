"""Who is asking: the pool's project tokens and its operator token, and browser sessions.

A token is checked exactly as the pool service checks it (SHA-256 of the token against the
project's stored hash, compared in constant time), so the console accepts the same tokens as
the pool API. A browser logs in once with its token and gets a random session id in an
HttpOnly cookie; the token itself is never stored, logged or put in a URL.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from collections.abc import Iterable

from xirang_core.errors import XirangError
from xirang_core.pool.quota import Project

OPERATOR = "*operator*"
SESSION_COOKIE = "xirang_console"


class AuthError(XirangError):
    """A request without a valid token or session."""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def whoami(token: str, projects: Iterable[Project], operator_token: str) -> str:
    """``OPERATOR`` or the project ``token`` belongs to; :class:`AuthError` otherwise."""
    if not token:
        raise AuthError("log in with your project token (or send 'Authorization: Bearer <token>')")
    digest = token_hash(token)
    if operator_token and hmac.compare_digest(digest, token_hash(operator_token)):
        return OPERATOR
    for project in projects:
        if project.token_hash and hmac.compare_digest(digest, project.token_hash):
            return project.name
    raise AuthError("invalid token")


class Sessions:
    """Session ids for logged-in browsers (in memory: a console restart logs everyone out)."""

    def __init__(self, limit: int = 10_000) -> None:
        self._who: dict[str, str] = {}
        self._lock = threading.Lock()
        self.limit = limit

    def open(self, who: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            if len(self._who) >= self.limit:
                self._who.pop(next(iter(self._who)))
            self._who[sid] = who
        return sid

    def who(self, sid: str) -> str | None:
        with self._lock:
            return self._who.get(sid)

    def close(self, sid: str) -> None:
        with self._lock:
            self._who.pop(sid, None)
