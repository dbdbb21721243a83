"""What the command line prints: help filled to the terminal, and one-line errors.

Below every command (``xirang`` itself, the tools, the service's commands), so that each can
print as the others do without importing the command line that dispatches to it."""

from __future__ import annotations

import re
import shutil
import textwrap


def help_text(doc: str) -> str:
    """A docstring as a terminal shows it: reST's ``literal`` markup without the backticks, and
    its prose paragraphs filled to the terminal's width (indented lines, a synopsis, kept)."""
    text = re.sub(r"``(.+?)``", r"\1", doc, flags=re.S)
    width = shutil.get_terminal_size().columns
    return "\n\n".join(
        part if part.startswith(" ") or "\n " in part else textwrap.fill(part, width)
        for part in textwrap.dedent(text).strip().split("\n\n")
    )


def report_error(exc: BaseException) -> None:
    """One line on stderr: what is wrong and what would be valid."""
    from rich.console import Console
    from rich.markup import escape

    # escaped: a message naming a list value ([2, 4]) is not rich markup
    label = getattr(exc, "label", "xirang error")
    message = f"[bold red]{label}:[/] {escape(str(exc))}"
    Console(stderr=True, highlight=False).print(message, soft_wrap=True)
