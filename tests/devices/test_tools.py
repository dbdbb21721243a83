"""Running vendor tools never raises; recorded outputs replay by command prefix."""

from __future__ import annotations

import sys

from xirang.devices.replay import ReplayRunner
from xirang.devices.tools import ToolOutput, kernel_log, run_tool


def test_a_missing_tool_is_an_error_not_an_exception() -> None:
    result = run_tool(["xirang-no-such-tool", "-q"])
    assert not result.ok and "not found on PATH" in result.error


def test_a_failing_tool_keeps_its_output() -> None:
    code = "print('GPU 0: ok'); import sys; sys.exit(15)"
    result = run_tool([sys.executable, "-c", code])
    assert "exited 15" in result.error
    assert result.stdout.strip() == "GPU 0: ok"


def test_a_hung_tool_times_out() -> None:
    result = run_tool([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.5)
    assert "did not answer" in result.error


def test_replay_answers_the_longest_recorded_prefix() -> None:
    runner = ReplayRunner({("tool",): "plain", ("tool", "topo"): "matrix"})
    assert runner(["tool", "topo", "-m"]).stdout == "matrix"
    assert runner(["tool", "--query"]).stdout == "plain"
    assert not runner(["other"]).ok
    assert runner.calls[0] == ("tool", "topo", "-m")


def test_kernel_log_falls_back_to_journalctl() -> None:
    runner = ReplayRunner(
        {
            ("dmesg",): ToolOutput(("dmesg",), error="dmesg: read kernel buffer failed"),
            ("journalctl",): "kernel: NVRM: Xid (PCI:0000:3b:00): 79",
        }
    )
    assert "Xid" in kernel_log(runner)
