"""What a user sees of a job's past (issue #38): ``xirang pool history JOB`` and
``GET /v1/jobs/<id>/history`` tell queued, placed (where), preempted (by whom and why), resumed
and finished with tokens and cost; ``xirang pool jobs --json`` works and jobs show tokens and
cost. A real pool over HTTP, metered by a price book, with one preemption."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pool.test_service import OPERATOR, Clock
from xirang_service.cost.governor import PoolBudgets
from xirang_service.pool.cli import main
from xirang_service.pool.client import PoolClient
from xirang_service.pool.errors import PoolError
from xirang_service.pool.rest import serve
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore

#: what a device-hour of type gpu costs (docs/cost.md's price book format)
BOOK = "prices: {gpu: 2.0}\n"


@dataclass
class Story:
    url: str
    service: PoolService
    pretrain: int  # cv's 8-card job, preempted once and resumed
    finetune: int  # nlp's job that reclaimed nlp's guarantee
    cv_token: str
    folder: Path  # the pool's store pool.db and cost store cost.db


@pytest.fixture
def story(tmp_path: Path, cluster_file: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Story]:
    """cv's job borrows nlp's half of the pool; nlp's job takes it back (a preemption); once
    nlp's job ends, cv's resumes and finishes, reporting its tokens; the pool meters it all."""
    monkeypatch.delenv("XIRANG_POOL_TOKEN", raising=False)
    (tmp_path / "book.yaml").write_text(BOOK)
    clock = Clock()
    budgets = PoolBudgets.from_file(tmp_path / "book.yaml", tmp_path / "cost.db")
    store = PoolStore(tmp_path / "pool.db")
    service = PoolService(store, cluster_file, "priority", OPERATOR, clock=clock, budgets=budgets)
    server = serve(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    operator = PoolClient(url, OPERATOR)
    cv_token = operator.call("PUT", "/v1/projects/cv", {"rotate_token": True})["token"]
    pretrain = operator.submit(project="cv", cards=8, name="pretrain")["id"]
    clock.now += 600
    finetune = operator.submit(project="nlp", cards=4, name="finetune")["id"]
    clock.now += 600
    operator.complete(finetune, ok=True)
    clock.now += 3600
    operator.complete(pretrain, ok=True, tokens=123456, run_ended_at=clock.now)
    service.tick()  # meters the pool's usage into the cost store
    yield Story(url, service, pretrain, finetune, cv_token, tmp_path)
    server.shutdown()
    store.close()
    budgets.close()


def test_history_tells_queued_placed_preempted_resumed_finished(story: Story, capsys) -> None:
    history = PoolClient(story.url, story.cv_token).call(
        "GET", f"/v1/jobs/{story.pretrain}/history"
    )
    assert [e["event"] for e in history["events"]] == [
        "queued",
        "placed",
        "preempted",
        "resumed",
        "finished",
    ]
    placed, preempted = history["events"][1], history["events"][2]
    assert placed["text"].startswith("placed on 8 gpu device(s) on n-0000, n-0001")
    assert preempted["detail"]["by"] == story.finetune
    assert f"by job {story.finetune}" in preempted["text"]
    assert "project nlp reclaimed its guaranteed share" in preempted["text"]
    assert "after waiting 10 min" in history["events"][3]["text"]
    assert history["tokens"] == 123456
    charge = PoolClient(story.url, OPERATOR).charge(story.pretrain)
    assert history["cost"] == {"amount": charge["amount"], "currency": "USD"}
    assert charge["amount"] > 0

    assert (
        main(["--url", story.url, "--token", story.cv_token, "history", str(story.pretrain)]) == 0
    )
    out = capsys.readouterr().out
    for shown in ("queued", "placed", "preempted", "resumed", "finished: done", "123,456"):
        assert shown in out, out
    assert f"{charge['amount']:.2f} USD" in out and f"by job {story.finetune}" in out


def test_history_is_scoped_to_the_project_like_the_other_job_routes(story: Story) -> None:
    nlp = PoolClient(story.url, OPERATOR).call("PUT", "/v1/projects/nlp", {"rotate_token": True})
    with pytest.raises(PoolError) as other:
        PoolClient(story.url, nlp["token"]).call("GET", f"/v1/jobs/{story.pretrain}/history")
    with pytest.raises(PoolError) as unknown:
        PoolClient(story.url, OPERATOR).call("GET", "/v1/jobs/999/history")
    assert other.value.status == unknown.value.status == 404
    assert "no job 999" in str(unknown.value)


def test_pool_jobs_json_as_the_footer_suggests_with_tokens_and_cost(
    story: Story, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["--url", story.url, "--token", OPERATOR, "jobs", "--json"]) == 0
    jobs = {j["id"]: j for j in json.loads(capsys.readouterr().out)}
    assert jobs[story.pretrain]["tokens"] == 123456
    assert jobs[story.pretrain]["cost"]["amount"] > 0
    assert jobs[story.finetune]["tokens"] is None  # its executor reported none
    one = PoolClient(story.url, story.cv_token).job(story.pretrain)
    assert (one["tokens"], one["cost"]) == (123456, jobs[story.pretrain]["cost"])
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["--url", story.url, "--token", OPERATOR, "jobs"]) == 0
    table = capsys.readouterr().out
    assert "tokens" in table and "123456" in table
    assert f"{jobs[story.pretrain]['cost']['amount']:.2f} USD" in table


def test_the_pool_executor_reports_the_tokens_its_run_summary_counts(tmp_path: Path) -> None:
    """``scheduler=pool`` completes its job with :func:`run_usage`: the summary's tokens go
    with it (what ``pool jobs`` and ``pool history`` show); a fraction is refused."""
    from xirang_service.cost.usage import UsageError, check_report, run_usage

    (tmp_path / "summary.json").write_text(json.dumps({"wall_time_s": 50.0, "tokens": 4096}))
    assert run_usage(tmp_path, 1, 0.0, 100.0)["tokens"] == 4096
    with pytest.raises(UsageError, match="tokens must be a whole number"):
        check_report({"tokens": 1.5})


def test_the_console_job_page_shows_the_same_history(story: Story) -> None:
    """``xirang console`` over the pool's state: /jobs/<id> tells the job's history, its
    tokens and cost, to its project and the operator; to another project it does not exist."""
    import urllib.error
    import urllib.request

    from xirang_service.console.metrics_store import MetricsStore
    from xirang_service.console.server import serve as console_serve
    from xirang_service.console.source import ConsoleSource
    from xirang_service.cost.store import CostStore

    costs = CostStore(story.folder / "cost.db")
    pool = PoolStore(story.folder / "pool.db")
    source = ConsoleSource(pool, costs, MetricsStore(), None, OPERATOR, ttl=0.0)
    server = console_serve(source)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    nlp = PoolClient(story.url, OPERATOR).call("PUT", "/v1/projects/nlp", {"rotate_token": True})

    def get(path: str, token: str) -> tuple[int, str]:
        ask = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(ask, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as refused:
            return refused.code, refused.read().decode()

    try:
        source.snapshot()  # the console reads the new project token
        status, page = get(f"/jobs/{story.pretrain}", story.cv_token)
        assert status == 200, page
        charge = PoolClient(story.url, OPERATOR).charge(story.pretrain)
        for shown in ("queued", "placed", "preempted", "resumed", "finished: done"):
            assert f"<td>{shown}" in page, page
        assert f"preempted by job {story.finetune}: project nlp reclaimed" in page
        assert "123,456" in page and f"{charge['amount']:.2f} USD" in page
        assert get(f"/jobs/{story.pretrain}", nlp["token"])[0] == 404
        assert get("/jobs/999", OPERATOR)[0] == 404
        live = PoolClient(story.url, OPERATOR).submit(project="cv", cards=1)["id"]
        assert f'<a href="/jobs/{live}">{live}</a>' in get("/jobs", OPERATOR)[1]  # the queue links
    finally:
        server.shutdown()
        server.server_close()
        pool.close()
        costs.close()


def test_a_queued_jobs_history_says_why_it_waits(
    tmp_path: Path, cluster_file: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Slurm's pending reason, for a pool job: the last scheduling pass's reason for each
    queued job it looked at (no room, a project at its borrowing limit), else its place in
    line; ``xirang pool history`` prints it last."""
    monkeypatch.delenv("XIRANG_POOL_TOKEN", raising=False)
    store = PoolStore(tmp_path / "pool.db")
    service = PoolService(store, cluster_file, "priority", OPERATOR, clock=Clock())
    server = serve(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        operator = PoolClient(url, OPERATOR)
        operator.call("PUT", "/v1/projects/cv", {"guaranteed": 4, "borrow_limit": 0})
        running = operator.submit(project="nlp", cards=6, name="running")["id"]
        full = operator.submit(project="nlp", cards=4, name="full")["id"]
        capped = operator.submit(project="cv", cards=6, name="capped")["id"]

        def last(job: int) -> dict:
            return operator.call("GET", f"/v1/jobs/{job}/history")["events"][-1]

        assert last(running)["event"] == "placed"
        assert last(full) == {**last(full), "event": "waiting"}
        assert last(full)["text"] == "waiting: no room: needs 4 gpu (2 free)"
        assert last(capped)["text"] == (
            "waiting: project cv at its borrowing limit: 0 card(s) in use, "
            "4 guaranteed + 0 borrowed at most"
        )
        assert main(["--url", url, "--token", OPERATOR, "history", str(full)]) == 0
        assert "waiting: no room: needs 4 gpu (2 free)" in capsys.readouterr().out
        operator.complete(running, ok=True)
        service.tick()
        assert last(full)["event"] == "placed"  # room now: no longer waiting
    finally:
        server.shutdown()
        store.close()
