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
