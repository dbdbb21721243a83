"""An S3 tier with no endpoint configured goes to AWS; where AWS cannot be reached the run fails
at once naming ``storage.endpoint_url`` (it used to retry every request for about a minute)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from xirang.storage.local_s3 import free_port

ARGS = ("storage=s3_cache", "data=snapshot", "data.uri=s3://xirang-nowhere/corpus")


def test_an_unreachable_default_endpoint_fails_fast_naming_the_setting(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()
    }
    env.update(
        AWS_ACCESS_KEY_ID="xirang-test",
        AWS_SECRET_ACCESS_KEY="xirang-test-secret",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        # AWS out of reach on any machine, online or not: its only way out refuses connections
        HTTPS_PROXY=f"http://127.0.0.1:{free_port()}",
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "xirang", *ARGS],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    stderr = " ".join(result.stderr.split())
    assert "xirang error: s3://xirang-nowhere/corpus: storage.endpoint_url is not set" in stderr
    assert "Traceback" not in stderr
    assert elapsed < 40, f"took {elapsed:.0f} s to fail"  # start-up on a busy machine, one probe
