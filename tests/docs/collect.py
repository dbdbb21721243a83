"""The shell commands README.md and docs/*.md show, as a reader would copy them.

A command is a line of a code block (fenced, or indented four spaces after a blank line) that
``PROGRAMS`` matches (after an optional ``$ `` prompt); a trailing backslash continues it,
`` # `` or a run of three spaces starts its explanation. The lines of the block after a
command that are not commands are the output the docs show for it. A line
``<!-- docs-test: skip (why) -->`` before a block skips every command in it;
``<!-- docs-test: figures -->`` says its output's numbers are exact (a seeded replay), where
otherwise any number matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = re.compile(
    r"(python -m xirang|xirang(?! error:)|pytest)(\s|$)|python (benchmarks/|-c )|pip |export "
    r"|torchrun "
)
SKIP_MARK = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<why>[^)]*)\)\s*-->")
FIGURES_MARK = re.compile(r"<!--\s*docs-test:\s*figures\s*-->")
_EXPLANATION = re.compile(r"\s+#\s|\s{3,}")
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>\S*)\s*$")


@dataclass(frozen=True)
class DocCommand:
    """One command as the docs show it, where, and what they show it printing."""

    file: str
    line: int
    text: str
    output: tuple[str, ...] = ()
    skip: str = ""
    figures: bool = False

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


def documents() -> list[Path]:
    """README.md, then every page under docs/ and its folders (docs/benchmarks/), in name order."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def collect(paths: list[Path] | None = None) -> list[DocCommand]:
    """Every command in ``paths`` (default: the documents), in reading order."""
    found: list[DocCommand] = []
    for path in paths or documents():
        name = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else path.name
        for start, lines, mark in _blocks(path.read_text().splitlines()):
            found.extend(_commands(name, start, lines, mark))
    return found


def _blocks(lines: list[str]) -> list[tuple[int, list[str], str]]:
    """(first line number, lines, the marker line above it) of each code block."""
    blocks: list[tuple[int, list[str], str]] = []
    i = 0
    while i < len(lines):
        skip = _mark_before(lines, i)
        fence = _FENCE.match(lines[i])
        if fence and fence["lang"] in ("", "sh", "bash", "console", "shell"):
            end = next((j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j])), len(lines))
            blocks.append((i + 2, [ln.strip() for ln in lines[i + 1 : end]], skip))
            i = end + 1
        elif fence:  # a block of another language: python, yaml, ...
            i = next((j for j in range(i + 1, len(lines)) if _FENCE.match(lines[j])), i) + 1
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            end = i
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            blocks.append((i + 1, [ln[4:].rstrip() for ln in lines[i:end]], skip))
            i = end
        else:
            i += 1
    return blocks


def _mark_before(lines: list[str], i: int) -> str:
    """The nearest non-blank line above line ``i`` (where a marker would be)."""
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    return lines[j] if j >= 0 else ""


def _commands(file: str, start: int, lines: list[str], mark: str) -> list[DocCommand]:
    """The commands of one block, each with the output lines that follow it."""
    skip = SKIP_MARK.search(mark)
    figures = bool(FIGURES_MARK.search(mark))
    found: list[DocCommand] = []
    i = 0
    while i < len(lines):
        line = lines[i].removeprefix("$ ")
        if not PROGRAMS.match(line):
            i += 1
            continue
        number, text = start + i, line
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1].rstrip() + " " + lines[i].strip()
        text = _EXPLANATION.split(text, maxsplit=1)[0].strip()
        output: list[str] = []
        while i + 1 < len(lines) and not PROGRAMS.match(lines[i + 1].removeprefix("$ ")):
            i += 1
            output.append(lines[i])
        while output and not output[-1].strip():
            output.pop()
        found.append(
            DocCommand(file, number, text, tuple(output), skip["why"] if skip else "", figures)
        )
        i += 1
    return found
