"""Console sessions end (time, token rotation), log-in needs the form's CSRF token and the
console's own origin, and no other site may frame a console page."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.console.test_console_api import OPENER, csrf_of, get, log_out
from tests.cost.pools import OPERATOR_TOKEN
from xirang_core.errors import ConfigError
from xirang_service.console.auth import AuthError, Sessions, check_same_origin, token_hash
from xirang_service.pool.quota import Project
from xirang_service.pool.service import OPERATOR


def log_in(url: str, token: str, csrf: str | None = None, **headers: str) -> tuple[int, str]:
    """Log in as a browser does (the form, then its POST); returns the status and the session
    cookie (``name=value``, empty when none was set). ``csrf`` overrides the form's token."""
    _, page_headers, page = get(url + "/login")
    jar = page_headers["Set-Cookie"].split(";")[0]
    field = re.search(r'name=csrf value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"token": token, "csrf": field if csrf is None else csrf})
    request = urllib.request.Request(url + "/login", data=form.encode(), method="POST")
    request.add_header("Cookie", jar)
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with OPENER.open(request, timeout=10) as answer:
            return answer.status, ""
    except urllib.error.HTTPError as err:
        cookie = err.headers.get("Set-Cookie", "")
        return err.code, cookie.split(";")[0] if "xirang_console=" in cookie else ""


def test_log_in_needs_the_forms_csrf_token_and_the_consoles_origin(console) -> None:
    token = console.pool.tokens["vision"]
    assert log_in(console.url, token, csrf="forged")[0] == 403
    assert log_in(console.url, token, Origin="https://evil.example")[0] == 403
    assert log_in(console.url, token, Sec_Fetch_Site="cross-site")[0] == 403
    status, cookie = log_in(console.url, token, Origin=console.url)
    assert status == 303 and cookie
    assert get(console.url + "/jobs", cookie=cookie)[0] == 200


def test_log_out_is_a_post_with_the_sessions_csrf_token(console) -> None:
    _, cookie = log_in(console.url, console.pool.tokens["vision"])
    status, _, page = get(console.url + "/jobs", cookie=cookie)
    assert status == 200 and "action=/logout" in page
    assert get(console.url + "/logout", cookie=cookie)[0] == 405  # a link cannot log out
    assert log_out(console.url, cookie, "forged") == 403
    assert log_out(console.url, cookie, csrf_of(page), Origin="https://evil.example") == 403
    assert get(console.url + "/jobs", cookie=cookie)[0] == 200  # still logged in
    _, other = log_in(console.url, console.pool.tokens["vision"])
    assert log_out(console.url, cookie, csrf_of(get(console.url + "/", cookie=other)[2])) == 403
    assert log_out(console.url, cookie, csrf_of(page)) == 303
    assert get(console.url + "/jobs", cookie=cookie)[0] == 303
    assert get(console.url + "/jobs", cookie=other)[0] == 200  # only that session ended
    assert "action=/logout" not in get(console.url + "/jobs", console.pool.tokens["nlp"])[2]


def test_a_session_ends_when_its_token_is_rotated(console) -> None:
    status, cookie = log_in(console.url, console.pool.tokens["vision"])
    assert status == 303 and get(console.url + "/jobs", cookie=cookie)[0] == 200
    console.pool.service.set_quota(OPERATOR, "vision", {"rotate_token": True})
    assert get(console.url + "/jobs", cookie=cookie)[0] == 303  # back to the log-in page

    status, cookie = log_in(console.url, OPERATOR_TOKEN)
    assert get(console.url + "/nodes", cookie=cookie)[0] == 200
    console.source.reload_operator_token = lambda: "a-new-operator-token"
    assert get(console.url + "/nodes", cookie=cookie)[0] == 303


def test_every_answer_forbids_framing(console) -> None:
    for path in ("/login", "/jobs", "/api/jobs", "/nope"):
        _, headers, _ = get(console.url + path)
        assert headers["Content-Security-Policy"] == "frame-ancestors 'none'", path
        assert headers["X-Frame-Options"] == "DENY", path


def test_a_session_expires_after_its_ttl() -> None:
    now = [0.0]
    sessions = Sessions(ttl_s=60, clock=lambda: now[0])
    projects = [Project("nlp", 8, token_hash="")]
    sid = sessions.open(OPERATOR, OPERATOR_TOKEN)
    now[0] = 59.0
    assert sessions.who(sid, projects, OPERATOR_TOKEN) == OPERATOR
    now[0] = 60.0
    assert sessions.who(sid, projects, OPERATOR_TOKEN) is None
    now[0] = 0.0  # gone for good, not merely hidden
    assert sessions.who(sid, projects, OPERATOR_TOKEN) is None
    with pytest.raises(ConfigError, match="positive"):
        Sessions(ttl_s=0)


def test_a_project_logging_in_over_and_over_never_closes_the_operators_session() -> None:
    """10,001 log-ins by one project once evicted every other session, the operator's too."""
    sessions = Sessions(ttl_s=3600, limit=100, per_who=8)
    projects = [Project("nlp", 8, token_hash=token_hash("nlp-token"))]
    operator = sessions.open(OPERATOR, OPERATOR_TOKEN)
    mine = [sessions.open("nlp", "nlp-token") for _ in range(10_001)]
    assert sessions.who(operator, projects, OPERATOR_TOKEN) == OPERATOR
    assert [sessions.who(s, projects, OPERATOR_TOKEN) for s in mine[-8:]] == ["nlp"] * 8
    assert sessions.who(mine[-9], projects, OPERATOR_TOKEN) is None  # its own oldest made room


@pytest.mark.parametrize(
    ("method", "headers", "allowed"),
    [
        ("GET", {"Origin": "https://evil.example", "Host": "c:1"}, True),
        ("POST", {"Host": "c:1"}, True),
        ("POST", {"Origin": "http://c:1", "Host": "c:1"}, True),
        ("POST", {"Origin": "http://evil:1", "Host": "c:1"}, False),
        ("POST", {"Origin": "null", "Host": "c:1"}, False),
        ("POST", {"Sec-Fetch-Site": "cross-site", "Host": "c:1"}, False),
    ],
)
def test_state_changing_requests_must_come_from_the_console(method, headers, allowed) -> None:
    if allowed:
        check_same_origin(method, headers)
    else:
        with pytest.raises(AuthError):
            check_same_origin(method, headers)
