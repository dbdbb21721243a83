"""Lists come a page at a time (``?limit=``, and the ``X-Xirang-Continue`` cursor sent back as
``?continue=``), so no answer is larger than a page: following the cursor returns every job
exactly once, jobs submitted meanwhile included, and the repo's clients (PoolClient, ``xirang
pool jobs``) follow it, so they see every job past the default page too."""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from tests.pool.web import OPERATOR, Served, served
from xirang_service.pool.cli import main as cli_main
from xirang_service.pool.rest import LIMITS
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.web.pages import CONTINUE_HEADER, DEFAULT_LIMIT, MAX_LIMIT, MAX_PAGE_BYTES


def get(pool: Served, path: str, token: str = OPERATOR) -> tuple[int, Any, str]:
    """Status, JSON answer and the next page's cursor of ``GET path``."""
    connection = http.client.HTTPConnection(pool.host, pool.port, timeout=30)
    connection.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    answer = connection.getresponse()
    body = json.loads(answer.read())
    cursor = answer.getheader(CONTINUE_HEADER) or ""
    connection.close()
    return answer.status, body, cursor


def test_following_the_cursor_returns_every_job_exactly_once(
    tmp_path: Path, cluster_file: Path
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        first = [
            pool.service.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1}) for _ in range(12)
        ]
        seen: list[int] = []
        status, rows, cursor = get(pool, "/v1/jobs?limit=5")
        pages = 1
        while True:
            assert status == 200 and len(rows) <= 5
            seen += [row["id"] for row in rows]
            if pages == 1:  # submitted while the listing is under way: at its end, once
                later = pool.service.submit(OPERATOR_WHO, {"project": "cv", "cards": 1})
            if not cursor:
                break
            status, rows, cursor = get(pool, f"/v1/jobs?limit=5&continue={cursor}")
            pages += 1
        assert seen == sorted({job["id"] for job in first} | {later["id"]})
        assert pages == 3
        tenant = get(pool, "/v1/jobs?limit=5", pool.tokens["cv"])
        assert [row["id"] for row in tenant[1]] == [later["id"]] and tenant[2] == ""


def test_a_cursor_it_never_gave_and_a_limit_past_the_most_are_refused(
    tmp_path: Path, cluster_file: Path
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        for _ in range(3):
            pool.service.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1})
        _, _, cursor = get(pool, "/v1/jobs?limit=1")
        assert cursor
        status, answer, _ = get(pool, f"/v1/projects?continue={cursor}")  # another list's
        assert status == 400 and "not a cursor this list gave" in answer["error"]
        for bad in ("%21%21", "WyJqb2JzIiwiYSJd"):  # not base64; a cursor of jobs after "a"
            status, answer, _ = get(pool, f"/v1/jobs?continue={bad}")
            assert status == 400 and "X-Xirang-Continue" in answer["error"], answer
        status, answer, _ = get(pool, f"/v1/jobs?limit={MAX_LIMIT + 1}")
        assert status == 400 and "limit" in json.dumps(answer)


def test_the_client_and_the_cli_read_past_the_default_page(
    tmp_path: Path, cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        service = pool.service
        service.set_quota(OPERATOR_WHO, "nlp", {"max_jobs": DEFAULT_LIMIT + 30})
        made = [
            service.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1})
            for _ in range(DEFAULT_LIMIT + 20)
        ]
        status, rows, cursor = get(pool, "/v1/jobs")
        assert status == 200 and len(rows) == DEFAULT_LIMIT and cursor
        ids = [job["id"] for job in made]
        assert [row["id"] for row in pool.client("nlp").listing("/v1/jobs")] == ids
        assert cli_main(["--url", pool.url, "--token", OPERATOR, "--json", "jobs"]) == 0
        assert [row["id"] for row in json.loads(capsys.readouterr().out)] == ids
        assert cli_main(["--url", pool.url, "--token", OPERATOR, "--json", "queue"]) == 0
        queued = [row["id"] for row in json.loads(capsys.readouterr().out)]
        assert queued == [row["id"] for row in service.queue(OPERATOR_WHO)]
        assert len(queued) > DEFAULT_LIMIT


def test_a_page_of_large_jobs_ends_at_its_byte_bound_and_the_cursor_goes_on(
    tmp_path: Path, cluster_file: Path
) -> None:
    """However large the jobs a tenant stored, one answer holds at most MAX_PAGE_BYTES (and a
    row): what a client that reads slowly, or not at all, keeps of the service's memory."""
    with served(str(tmp_path / "pool.db"), cluster_file) as pool:
        blob = {"note": "x" * 50_000}
        made = [
            pool.service.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1, "payload": blob})
            for _ in range(40)
        ]
        connection = http.client.HTTPConnection(pool.host, pool.port, timeout=30)
        connection.request("GET", "/v1/jobs", headers={"Authorization": f"Bearer {OPERATOR}"})
        answer = connection.getresponse()
        first = answer.read()
        assert len(first) <= MAX_PAGE_BYTES and answer.getheader(CONTINUE_HEADER)
        assert 0 < len(json.loads(first)) < len(made)
        connection.close()
        listed = pool.client("nlp").listing("/v1/jobs")
        assert [row["id"] for row in listed] == [job["id"] for job in made]


def test_a_client_that_does_not_read_its_answer_is_cut_at_the_send_deadline(
    tmp_path: Path, cluster_file: Path
) -> None:
    """A client that asks for a page and reads nothing holds it only until the send deadline:
    then the service drops the connection and the unsent bytes (the client, reading at last,
    finds the answer cut short), and serves on."""
    # a send buffer smaller than a page, so part of the page waits in the service to be sent
    limits = dataclasses.replace(LIMITS, send_timeout_s=1.0, send_buffer_bytes=32 * 1024)
    with served(str(tmp_path / "pool.db"), cluster_file, limits) as pool:
        for _ in range(40):
            blob = {"note": "x" * 50_000}
            pool.service.submit(OPERATOR_WHO, {"project": "nlp", "cards": 1, "payload": blob})
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: it stalls
        sock.connect((pool.host, pool.port))
        request = f"GET /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {OPERATOR}\r\n\r\n"
        sock.sendall(request.encode())
        time.sleep(4)  # the deadline (1 s) passes while the client reads nothing
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(1 << 16):
                received += chunk
        sock.close()
        head, _, content = received.partition(b"\r\n\r\n")
        length = int(re.search(rb"content-length: (\d+)", head.lower()).group(1))  # type: ignore[union-attr]
        assert len(content) < length, "the whole answer was kept for a client that read nothing"
        assert get(pool, "/v1/status")[0] == 200
