"""Replay recorded outputs of vendor tools in place of running them.

Backends take a ``runner``; a :class:`ReplayRunner` answers each command with the text recorded
from the real tool on a real machine. The tests use it to exercise every parser and probe on
machines without accelerators, and an operator can use it to see what xirang makes of a support
bundle captured on a broken node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xirang.devices.tools import ToolOutput


@dataclass
class ReplayRunner:
    """Answers a command with the output recorded for the longest matching argv prefix.

    ``outputs`` maps a command prefix (``("nvidia-smi", "topo", "-m")``) to the recorded text, or
    to a :class:`ToolOutput` when the recording is a failure. Commands nobody recorded fail as a
    missing tool would. ``calls`` lists what was asked, for tests that check what was run.
    """

    outputs: Mapping[tuple[str, ...], str | ToolOutput]
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str]) -> ToolOutput:
        args = tuple(argv)
        self.calls.append(args)
        matches = [prefix for prefix in self.outputs if args[: len(prefix)] == prefix]
        if not matches:
            return ToolOutput(args, error=f"{args[0]} not found on PATH")
        recorded = self.outputs[max(matches, key=len)]
        if isinstance(recorded, ToolOutput):
            return ToolOutput(args, recorded.stdout, recorded.error)
        return ToolOutput(args, recorded)

    @classmethod
    def from_folder(cls, folder: Path, files: Mapping[tuple[str, ...], str]) -> ReplayRunner:
        """Recordings kept as files: ``files`` maps a command prefix to a file name in ``folder``;
        names that do not exist in ``folder`` are left out (that tool is "not installed")."""
        outputs: dict[tuple[str, ...], str | ToolOutput] = {
            prefix: (folder / name).read_text()
            for prefix, name in files.items()
            if (folder / name).exists()
        }
        return cls(outputs)
