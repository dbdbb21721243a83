"""Who is asking: the pool's project tokens and its operator token, and browser sessions.

A token is checked exactly as the pool service checks it (SHA-256 of the token against the
project's stored hash, compared in constant time), so the console accepts the same tokens as
the pool API. A browser logs in once with its token and gets a random session id in an
HttpOnly, SameSite=Strict cookie; the token itself is never stored, logged or put in a URL.
Sessions expire and end when their token is rotated; state-changing requests must come from
the console's own origin and carry a CSRF token; no other site may frame the console. The
functions here are the whole policy: the HTTP layer only calls them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from xirang_core.errors import ConfigError, XirangError
from xirang_service.pool.quota import Project

OPERATOR = "*operator*"
SESSION_COOKIE = "xirang_console"
#: a form's CSRF cookie, and the form field that must repeat it
CSRF_COOKIE = "xirang_csrf"
CSRF_FIELD = "csrf"
#: how long a console session lasts by default (``xirang console --session-hours``)
DEFAULT_TTL_S = 8 * 3600.0


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


def credential(who: str, projects: Iterable[Project], operator_token: str) -> str:
    """The hash of the token ``who`` logs in with now ("" when it has none): a session opened
    with another one outlives a rotation of its token by not a single request."""
    if who == OPERATOR:
        return token_hash(operator_token) if operator_token else ""
    return next((p.token_hash for p in projects if p.name == who), "")


@dataclass
class Session:
    """One logged-in browser: who, with which token (its hash), until when, and the CSRF
    token its pages' forms (log out) must send back."""

    who: str
    credential: str
    expires: float
    csrf: str


class Sessions:
    """Session ids for logged-in browsers (in memory: a console restart logs everyone out).

    A session ends ``ttl_s`` after log-in, at log-out, or as soon as the token it was opened
    with is rotated (the pool's ``--rotate-token``, a new operator token)."""

    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        limit: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        per_who: int = 32,
    ) -> None:
        if ttl_s <= 0:
            raise ConfigError(f"session ttl {ttl_s}: must be a positive number of seconds")
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.ttl_s, self.limit, self.clock, self.per_who = ttl_s, limit, clock, per_who

    def open(self, who: str, token: str) -> str:
        """A new session for ``who``, who just logged in with ``token``; returns its id.
        Each principal keeps at most ``per_who`` sessions (its oldest makes room), so no one
        who can log in, however often, closes another's session."""
        sid = secrets.token_urlsafe(32)
        session = Session(who, token_hash(token), self.clock() + self.ttl_s, new_csrf_token())
        with self._lock:
            mine = [k for k, s in self._open.items() if s.who == who]
            if len(mine) >= self.per_who:
                del self._open[mine[0]]
            elif len(self._open) >= self.limit:
                self._drop_oldest()
            self._open[sid] = session
        return sid

    def get(self, sid: str, projects: Iterable[Project], operator_token: str) -> Session | None:
        """The live session ``sid`` names, or None (unknown, expired, or its token rotated;
        such a session is closed for good)."""
        with self._lock:
            session = self._open.get(sid) if sid else None
            if session is None:
                return None
            current = credential(session.who, projects, operator_token)
            expired = self.clock() >= session.expires
            if expired or not hmac.compare_digest(session.credential, current):
                del self._open[sid]
                return None
            return session

    def who(self, sid: str, projects: Iterable[Project], operator_token: str) -> str | None:
        session = self.get(sid, projects, operator_token)
        return session.who if session else None

    def close(self, sid: str) -> None:
        with self._lock:
            self._open.pop(sid, None)

    def _drop_oldest(self) -> None:
        """Make room: expired sessions go first, else the oldest of whoever holds the most."""
        now = self.clock()
        expired = [sid for sid, s in self._open.items() if s.expires <= now]
        if not expired:
            held = Counter(s.who for s in self._open.values())
            busiest = held.most_common(1)[0][0]
            expired = [next(k for k, s in self._open.items() if s.who == busiest)]
        for sid in expired:
            del self._open[sid]


# --- CSRF and framing -------------------------------------------------------------------------

#: methods that change nothing; any other may be a forged request from another site
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def check_same_origin(method: str, headers: Mapping[str, str]) -> None:
    """:class:`AuthError` for a state-changing request another site made the browser send:
    ``Sec-Fetch-Site: cross-site``, or an ``Origin`` whose host is not the ``Host`` asked."""
    if method.upper() in SAFE_METHODS:
        return
    if headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        raise AuthError("cross-site request refused")
    origin = headers.get("Origin", "")
    if origin == "null":
        raise AuthError("request from an opaque origin refused")
    if origin and urlsplit(origin).netloc != headers.get("Host", ""):
        raise AuthError(f"request from another origin ({origin}) refused")


def new_csrf_token() -> str:
    """A token for a form: set it as the :data:`CSRF_COOKIE` cookie and as the form's
    :data:`CSRF_FIELD` (double submit; a cookie other sites can neither read nor set)."""
    return secrets.token_urlsafe(32)


def check_csrf(expected: str, sent: str) -> None:
    """:class:`AuthError` unless ``sent`` (the form's :data:`CSRF_FIELD`) equals ``expected``
    (the :data:`CSRF_COOKIE`)."""
    if not expected or not sent or not hmac.compare_digest(expected, sent):
        raise AuthError("missing or wrong CSRF token: reload the page and try again")


def cookie(name: str, value: str, max_age_s: float | None = None) -> str:
    """A ``Set-Cookie`` value scripts cannot read and other sites never send; an empty
    ``value`` deletes the cookie."""
    age = "; Max-Age=0" if not value else (f"; Max-Age={int(max_age_s)}" if max_age_s else "")
    return f"{name}={value}{age}; HttpOnly; SameSite=Strict; Path=/"


#: sent with every console answer: no page may frame the console (clickjacking)
SECURITY_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
