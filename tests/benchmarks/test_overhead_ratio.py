"""``benchmarks/overhead.py``'s figures under load: the median of paired per-round ratios, and CPU
time that counts the processes a tracker starts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "overhead.py"


@pytest.fixture(scope="module")
def overhead() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overhead_benchmark", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_spell_of_load_on_a_few_rounds_does_not_move_the_ratio(
    overhead: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # xirang costs 2% more; outside load doubles the plain side in two rounds and xirang in
    # one, and one plain round was luckily fast (a best-of-rounds figure would take it)
    plain = [1.0, 2.0, 1.0, 0.9, 2.0, 1.0, 1.0]
    xirang = [1.02, 1.02, 2.04, 1.02 * 0.9, 1.02, 1.02, 1.02]
    spans = {
        "xirang": [(t, t / 2) for t in xirang],
        "tracked": [(t * 1.01, t / 2) for t in xirang],
        "plain": [(t, t / 2) for t in plain],
    }
    overhead.report(spans, len(plain), 11)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = dict(item.split("=") for item in last.split())
    assert float(figures["overhead_ratio"]) == pytest.approx(1.02, abs=1e-3)
    assert float(figures["tracked_overhead_ratio"]) == pytest.approx(1.0302, abs=1e-3)
    assert float(figures["cpu_overhead_ratio"]) == pytest.approx(1.02, abs=1e-3)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc to read")
def test_cpu_seconds_count_a_child_process_while_it_runs(overhead: ModuleType) -> None:
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    child = subprocess.Popen([sys.executable, "-c", busy + "input()"], stdin=subprocess.PIPE)
    try:
        before = overhead.cpu_seconds()
        # until the child has spun its 0.6 s (it then waits on stdin): a deadline, not a count
        # of polls, as a loaded machine may give the child its 0.6 s of CPU over many seconds
        deadline = time.monotonic() + 300
        while overhead.cpu_seconds() - before < 0.5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert overhead.cpu_seconds() - before >= 0.5
    finally:
        child.communicate(b"\n", timeout=30)
