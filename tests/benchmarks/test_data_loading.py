"""benchmarks/data_loading.py at a tiny size: xirang's training path and the mmap bound (the
peers need their own environment, built from the network, so here they are reported n/a)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import data_loading as bench

ROOT = Path(__file__).resolve().parents[2]
RATIOS = (
    "warm_vs_streaming",
    "warm_vs_litdata",
    "cold_vs_streaming",
    "cold_vs_litdata",
    "resume_speedup_vs_streaming",
    "resume_speedup_vs_litdata",
    "warm_vs_mmap",
)
#: each resumed side's time to its first batch and whether its batches were the right ones
RESUMES = tuple(f"resume_{what}_{side}" for side in bench.RESUMED for what in ("ms", "exact"))


@pytest.mark.slow
def test_every_side_reads_the_same_batches_and_the_last_line_has_every_ratio(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "benchmarks/data_loading.py", "--tokens", "200000", "--runs", "1"]
    env = {**os.environ, "XIRANG_HOME": str(tmp_path)}
    done = subprocess.run(
        [*argv, "--peers", "none"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    out = done.stdout
    assert "every side read the same tokens" in out  # xirang's epoch equals the mmap file's
    assert re.search(
        r"cold  xirang .* batches/s.*, 12 batches, \d+ files cached from the origin", out
    )
    assert re.search(r"resume at batch 6: xirang \d+ ms to its first batch; its next 4 ", out)
    assert "warm  streaming n/a (--peers none)" in out
    assert "resume at batch 6: litdata n/a (--peers none)" in out
    last = dict(item.split("=") for item in out.strip().splitlines()[-1].split())
    assert tuple(last) == RATIOS + RESUMES
    assert float(last["warm_vs_mmap"]) > 0
    assert {last[k] for k in RATIOS[:6]} == {"n/a"}
    assert int(last["resume_ms_xirang"]) > 0
    assert last["resume_exact_xirang"] == "yes"
    assert last["resume_exact_streaming"] == last["resume_ms_litdata"] == "n/a"


#: a fresh process: builds a tiny snapshot, then resumes mid-epoch as a benchmark pass does,
#: printing the modules first imported inside the timed span
_TIMED_IMPORTS = """
import argparse, json, sys, tempfile
from pathlib import Path
sys.path.insert(0, {root!r})
from benchmarks import data_loading as bench
work = Path(tempfile.mkdtemp())
stream, offsets = bench.make_stream(200_000, 129, 4)
snap = bench.write_xirang(stream, offsets, work / "xirang", 50_000)
for name in [m for m in sys.modules if m.startswith(("xirang", "pyarrow", "zstandard"))]:
    del sys.modules[name]  # as a pass's fresh process starts: nothing of the reader imported
timed = bench.timed
def spy(fn, count):
    before = set(sys.modules)
    figures = timed(fn, count)
    print(json.dumps(sorted(set(sys.modules) - before)))
    return figures
bench.timed = spy
args = argparse.Namespace(remote="", dir=str(work / "xirang"), side="", snapshot=snap,
                          cache="", span=129, batch=4, workers=0, stop=100, resume="step",
                          check=2)
bench.xirang_side(args)
"""


def test_a_resumes_timed_span_imports_none_of_the_reader() -> None:
    """Issue 53: since the reader became the plugin xirang_data, its modules (and pyarrow's)
    were imported inside a resume's timed span, most of the 145 ms xirang's first batch took
    against Streaming's 134; no side's imports are timed."""
    done = subprocess.run(
        [sys.executable, "-c", _TIMED_IMPORTS.format(root=str(ROOT))],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert [m for m in imported if m.startswith(("xirang_data", "pyarrow"))] == []


def _side(work: Path, snapshot: str, stop: int, resume: str = "") -> list[str]:
    """The hashes of the 3 batches after ``stop``: read on by a pass from the start, or read
    by a loader resumed there (``resume="step"``), as one side's process of the benchmark."""
    args = argparse.Namespace(
        remote="",
        dir=str(work),
        side="",
        snapshot=snapshot,
        cache="",
        span=129,
        batch=4,
        workers=0,
        stop=stop,
        resume=resume,
        check=3,
    )
    return bench.xirang_side(args)["next"]


def test_the_resume_check_tells_the_batches_an_uninterrupted_pass_reads_next(
    tmp_path: Path,
) -> None:
    """Issue 53: the resume figure was a time alone; a loader that restarted its epoch, or
    came back one batch off, would have read as fast. Now a resume counts as exact only when
    its first batches hash as the batches the interrupted pass read next."""
    stream, offsets = bench.make_stream(200_000, 129, 4)
    snapshot = bench.write_xirang(stream, offsets, tmp_path / "xirang", 50_000)
    after_five = _side(tmp_path / "xirang", snapshot, 5)
    assert _side(tmp_path / "xirang", snapshot, 5, resume="step") == after_five
    assert _side(tmp_path / "xirang", snapshot, 6, resume="step") != after_five
    assert len(set(after_five)) == 3  # three different batches, not one hashed thrice
