"""A real Prometheus (Debian's package) scrapes the console's ``/metrics`` with a bearer token
and answers PromQL for the pool gauges through its HTTP API. The test starts its own server on
loopback with a temporary config and data folder, and stops it. Without Prometheus it skips
here and FAILS in CI (CI=true), where .ci/services/prometheus.sh installs it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cost.pools import OPERATOR_TOKEN

pytestmark = pytest.mark.service


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prometheus(console, tmp_path: Path) -> Iterator[str]:
    """A Prometheus scraping ``console`` every second as the operator; yields its base URL."""
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus is not installed (CI must run .ci/services/prometheus.sh)")
        pytest.skip("prometheus is not installed (.ci/services/prometheus.sh installs it)")
    token = tmp_path / "token"
    token.write_text(OPERATOR_TOKEN)
    target = urllib.parse.urlsplit(console.url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "xirang",
                        "metrics_path": "/metrics",
                        "authorization": {"type": "Bearer", "credentials_file": str(token)},
                        "static_configs": [{"targets": [target]}],
                    }
                ],
            }
        )
    )
    address = f"127.0.0.1:{free_port()}"
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={address}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://{address}"
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return body["data"]["result"]


def answer(base: str, promql: str, timeout: float = 60) -> list[dict]:
    """The query's result once the server is up and has scraped (it scrapes every second)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = query(base, promql)
            if result:
                return result
        except OSError:  # not listening yet
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no answer to {promql} within {timeout}s")
        time.sleep(0.5)


def test_prometheus_scrapes_the_console_and_answers_promql(prometheus) -> None:
    [up] = answer(prometheus, 'up{job="xirang"} == 1')  # scraped with the token, not refused
    assert up["value"][1] == "1"
    devices = answer(prometheus, "sum by (device_type) (xirang_pool_devices)")
    assert {r["metric"]["device_type"]: float(r["value"][1]) for r in devices}["a100"] == 32
    [water] = answer(prometheus, 'xirang_pool_utilisation_ratio{device_type="a100"}')
    assert float(water["value"][1]) == 0.75
    [cost] = answer(prometheus, 'xirang_cost_total{project="nlp",device_type="a100"}')
    assert float(cost["value"][1]) == 126.0


#: tokens a step trains in the restart test, and its run: 30 steps, a worker restart that
#: resumes from the step-25 checkpoint, a preemption and an exporter restart, 48 steps in all
TOKENS_PER_STEP, LAST_STEP = 5120, 48


def query_at(base: str, promql: str, at: float) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql, "time": at})
    with urllib.request.urlopen(url, timeout=5) as reply:
        body = json.load(reply)
    assert body["status"] == "success", body
    return body["data"]["result"]


def scraped(base: str, promql: str, value: float) -> None:
    """Wait until the server has scraped ``promql`` at ``value``."""
    answer(base, f"{promql} == {value}")


def test_the_tokens_counter_never_resets_across_worker_job_and_exporter_restarts(
    console, prometheus, tmp_path: Path, monkeypatch
) -> None:
    """What Prometheus itself computes over a run whose worker restarts from an earlier
    checkpoint (its newest record drops from 153,600 to 133,120 tokens), whose pool job is
    requeued and placed again, and whose exporter starts afresh: no reset, and increase()
    is the tokens the run trained."""
    from xirang_core.train.report import MetricsLog
    from xirang_service.console import prometheus as exporter
    from xirang_service.pool.service import OPERATOR as POOL_OPERATOR

    run = tmp_path / "run"
    run.mkdir()
    service = console.pool.service
    job = service.submit(POOL_OPERATOR, {"project": "nlp", "cards": 8, "name": "restarts",
                                          "payload": {"run_dir": str(run)}})  # fmt: skip
    series = f'xirang_train_tokens_total{{pool_job="{job["id"]}"}}'
    step = f'xirang_train_step{{pool_job="{job["id"]}"}}'
    scraped(prometheus, series, 0)  # running, nothing logged yet

    def train(segment: int, steps: range) -> None:
        log = MetricsLog(run, segment)
        for chunk in (steps[i : i + 6] for i in range(0, len(steps), 6)):
            for s in chunk:
                log.write({"step": s, "loss": 5.0, "tokens": s * TOKENS_PER_STEP,
                           "tokens_per_s": 1000.0, "mfu": 0.4})  # fmt: skip
            scraped(prometheus, step, chunk[-1])

    train(1, range(1, 31))
    train(2, range(26, 27))  # the restarted worker resumed from step 25: its record is scraped
    train(2, range(27, 36))
    devices = set(service.job(POOL_OPERATOR, job["id"])["devices"])
    nodes = {d["node"] for d in service.devices(POOL_OPERATOR) if d["id"] in devices}
    for node in nodes:  # the job is requeued and placed again (its workers start afresh)
        service.drain(POOL_OPERATOR, node, "maintenance")
    for node in nodes:
        service.undrain(POOL_OPERATOR, node)
    service.tick()
    placed = service.job(POOL_OPERATOR, job["id"])
    assert placed["state"] == "running" and placed["requeues"] == 1
    monkeypatch.setattr(exporter, "TOKENS_SEEN", exporter.FurthestTokens())  # a new exporter
    train(3, range(36, LAST_STEP + 1))

    [raw] = query(prometheus, f"{series}[10m]")
    last = raw["values"][-1][0]  # evaluated at the last scrape: no extrapolation past it
    [resets] = query_at(prometheus, f"resets({series}[10m])", last)
    assert float(resets["value"][1]) == 0
    [grown] = query_at(prometheus, f"increase({series}[10m])", last)
    trained = LAST_STEP * TOKENS_PER_STEP  # 245,760
    assert abs(float(grown["value"][1]) - trained) <= 0.01 * trained
    assert grown["metric"]["job"] == "xirang"  # Prometheus's own label, not the pool job's
    assert "exported_job" not in raw["metric"] and raw["metric"]["pool_job"] == str(job["id"])
