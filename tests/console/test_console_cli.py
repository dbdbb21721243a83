"""``xirang console`` as an operator starts it, over a pool's state file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

from tests.cost.pools import OPERATOR_TOKEN, make_pool

BOOK = """
prices: {a100: 3.0, v100: 1.0}
windows: [{name: offpeak, start: 22, end: 6, multiplier: 0.5}]
"""


def console_command(tmp_path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "xirang",
        "console",
        "--cost-db",
        str(tmp_path / "c.db"),
        "--metrics-db",
        str(tmp_path / "m.db"),
        *args,
    ]


def test_the_console_serves_a_pool_state_and_meters_it(tmp_path):
    pool = make_pool(tmp_path, now=time.time() - 3600)  # the console's clock is the real one
    (tmp_path / "book.yaml").write_text(BOOK)
    env = {**os.environ, "XIRANG_POOL_OPERATOR_TOKEN": OPERATOR_TOKEN}
    command = console_command(
        tmp_path, "--state", str(pool.state), "--prices", str(tmp_path / "book.yaml"), "--port", "0"
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        while line and "http://" not in line:
            line = process.stdout.readline()
        url = line.split()[2]
        request = urllib.request.Request(f"{url}/metrics")
        request.add_header("Authorization", f"Bearer {OPERATOR_TOKEN}")
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read().decode()
        assert 'xirang_pool_devices{device_type="a100"} 32.0' in text
        assert "xirang_cost_total{" in text  # the pool's running jobs were metered at start
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_missing_state_file_is_one_clear_error(tmp_path):
    result = subprocess.run(
        console_command(tmp_path, "--state", str(tmp_path / "nope.db")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "xirang pool serve --state" in result.stderr and "Traceback" not in result.stderr


def test_a_bad_price_book_is_one_clear_error(tmp_path):
    pool = make_pool(tmp_path)
    (tmp_path / "book.yaml").write_text("prices: {a100: -1}\n")
    book = str(tmp_path / "book.yaml")
    command = console_command(tmp_path, "--state", str(pool.state), "--prices", book)
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "cost.prices" in result.stderr
