"""The console's API and pages with the pool's tokens: a project sees its own, the operator all."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message

import pytest

from tests.cost.pools import OPERATOR_TOKEN


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


OPENER = urllib.request.build_opener(NoRedirect)


def get(url: str, token: str = "", cookie: str = "") -> tuple[int, Message, str]:
    """Status, headers (looked up by name in any case, as HTTP's are) and text of a GET."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if cookie:
        request.add_header("Cookie", cookie)
    try:
        with OPENER.open(request, timeout=10) as answer:
            return answer.status, answer.headers, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode()


def api(console, path: str, token: str):
    status, _, body = get(console.url + path, token)
    assert status == 200, body
    return json.loads(body)


def test_without_a_token_pages_go_to_login_and_the_api_says_401(console):
    status, headers, _ = get(console.url + "/")
    assert status == 303 and headers["Location"] == "/login"
    status, _, body = get(console.url + "/api/jobs")
    assert status == 401 and "token" in json.loads(body)["error"]
    assert get(console.url + "/api/jobs", "not-a-token")[0] == 401


def test_a_project_sees_only_its_own_jobs_and_costs(console):
    nlp = console.pool.tokens["nlp"]
    jobs = api(console, "/api/jobs", nlp)
    assert {j["project"] for j in jobs} == {"nlp"} and len(jobs) == 3
    everything = api(console, "/api/jobs", OPERATOR_TOKEN)
    assert {j["project"] for j in everything} == {"nlp", "vision"}
    cost = api(console, "/api/cost", nlp)
    assert [r["key"] for r in cost["by"]["project"]["rows"]] == ["nlp"]
    assert [b["name"] for b in cost["budgets"]] == ["nlp"]
    assert api(console, "/api/cost", console.pool.tokens["vision"])["by"]["team"]["rows"] == []


def test_the_queue_shows_project_priority_and_wait(console):
    [queued] = [j for j in api(console, "/api/jobs", OPERATOR_TOKEN) if j["state"] == "queued"]
    assert (queued["project"], queued["priority"], queued["position"]) == ("vision", "normal", 1)
    assert queued["wait_s"] == 3 * 3600


def test_capacity_water_level_quota_and_drain_reasons(console):
    overview = api(console, "/api/overview", OPERATOR_TOKEN)
    a100 = next(t for t in overview["capacity"]["types"] if t["device_type"] == "a100")
    assert (a100["total"], a100["allocated"], a100["water_level"]) == (32, 24, 0.75)
    groups = {g["group"]: g["water_level"] for g in overview["capacity"]["groups"]}
    assert groups["a100-leaf0"] == 1.0 and groups["a100-leaf1"] == 0.5
    quotas = {q["project"]: q for q in overview["quotas"]}
    assert (quotas["nlp"]["in_guarantee"], quotas["nlp"]["borrowed"]) == (16, 8)
    assert quotas["vision"]["lent"] == 8  # its idle guarantee is what nlp borrows
    nodes = api(console, "/api/nodes", OPERATOR_TOKEN)
    assert nodes[0]["name"] == "v100-0001" and nodes[0]["reason"] == "ECC errors on GPU 3"
    assert get(console.url + "/api/nodes", console.pool.tokens["nlp"])[0] == 403


def test_costs_are_metered_and_budget_states_shown(console):
    cost = api(console, "/api/cost", OPERATOR_TOKEN)
    by_team = cost["by"]["team"]
    assert [r["key"] for r in by_team["rows"]] == ["research"]
    # two reserved a100 jobs and one borrowed (spot) for three hours: (2x2.1 + 1.05) x 8 x 3
    assert by_team["total"]["amount"] == "126.000000"
    [budget] = cost["budgets"]
    assert budget["state"] == "limit" and budget["action"] == "stop_submissions"


def test_login_form_sets_a_session_and_logout_ends_it(console):
    _, page_headers, page = get(console.url + "/login")
    csrf = re.search(r'name=csrf value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"token": console.pool.tokens["vision"], "csrf": csrf})
    request = urllib.request.Request(console.url + "/login", data=form.encode(), method="POST")
    request.add_header("Cookie", page_headers["Set-Cookie"].split(";")[0])
    with pytest.raises(urllib.error.HTTPError) as answer:  # 303 is not followed
        OPENER.open(request, timeout=10)
    cookie = answer.value.headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in answer.value.headers["Set-Cookie"]
    assert console.pool.tokens["vision"] not in answer.value.headers["Set-Cookie"]
    status, _, page = get(console.url + "/jobs", cookie=cookie)
    assert status == 200 and "project vision" in page and "vision-big" in page
    assert "nlp-train-0" not in page
    assert log_out(console.url, cookie, csrf_of(page)) == 303
    assert get(console.url + "/jobs", cookie=cookie)[0] == 303


def csrf_of(page: str) -> str:
    """The CSRF token a page's form carries."""
    return re.search(r'name=csrf value="([^"]+)"', page).group(1)


def log_out(url: str, cookie: str, csrf: str, **headers: str) -> int:
    """Post the pages' log-out form as a browser does; the status (303 is not followed)."""
    form = urllib.parse.urlencode({"csrf": csrf}).encode()
    request = urllib.request.Request(url + "/logout", data=form, method="POST")
    request.add_header("Cookie", cookie)
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with OPENER.open(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_wrong_token_at_login_is_one_clear_message(console):
    _, page_headers, page = get(console.url + "/login")
    csrf = re.search(r'name=csrf value="([^"]+)"', page).group(1)
    form = urllib.parse.urlencode({"token": "guess", "csrf": csrf}).encode()
    request = urllib.request.Request(console.url + "/login", data=form, method="POST")
    request.add_header("Cookie", page_headers["Set-Cookie"].split(";")[0])
    with pytest.raises(urllib.error.HTTPError) as answer:
        OPENER.open(request, timeout=10)
    assert answer.value.code == 401 and "invalid token" in answer.value.read().decode()


@pytest.mark.parametrize("path", ["/api/jobs", "/api/nodes"])
def test_the_lists_come_a_page_at_a_time_in_their_order(console, path: str) -> None:
    """``?limit=`` rows a page, the next page's cursor in ``X-Xirang-Continue``: following it
    gives the whole list, in the console's order, each row once."""
    whole = api(console, path, OPERATOR_TOKEN)
    assert len(whole) > 2
    pages, cursor = [], ""
    while True:
        query = urllib.parse.urlencode({"limit": 2, **({"continue": cursor} if cursor else {})})
        status, headers, body = get(f"{console.url}{path}?{query}", OPERATOR_TOKEN)
        assert status == 200 and len(json.loads(body)) <= 2
        pages += json.loads(body)
        cursor = headers.get("X-Xirang-Continue") or ""
        if not cursor:
            break

    def ids(rows: list[dict]) -> list:  # running_s moves with the clock: compare who
        return [row.get("id", row.get("name")) for row in rows]

    assert ids(pages) == ids(whole)
