"""What the command line prints: help filled to the terminal, and one-line errors.

Below every command (``xirang`` itself, the tools, the service's commands), so that each can
print as the others do without importing the command line that dispatches to it."""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported by the functions that print
    from rich.console import Console
    from rich.table import Table


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


def fitting_table(
    console: Console,
    build: Callable[[list[str]], Table],
    columns: list[str],
    keep: int = 1,
    leave_first: tuple[str, ...] = (),
) -> tuple[Table, list[str]]:
    """The table ``build`` makes of as many of ``columns`` as fit ``console`` with every value
    whole, and the columns left out. Each column is at least as wide as its longest word (its
    longest value where it does not wrap, its header's longest word): rich squeezes a table
    wider than the terminal by cutting values mid-word (a project name shrunk to nothing, a
    figure split over two lines), so columns leave, those named in ``leave_first`` first,
    then from the end, the first ``keep`` always staying, until the table fits."""
    shown = list(columns)
    order = [c for c in leave_first if c in columns[keep:]]
    order += [c for c in reversed(columns[keep:]) if c not in order]
    while True:
        table = build(shown)
        for column in table.columns:
            cells = [str(column.header), *(str(c) for c in column.cells)]
            words = [c if column.no_wrap else max(c.split() or [""], key=len) for c in cells]
            column.min_width = max(len(w) for w in [*words, *str(column.header).split()])
        wide = console.options.update_width(10 * console.width)
        if len(shown) <= keep or console.measure(table, options=wide).minimum <= console.width:
            return table, [c for c in columns if c not in shown]
        shown.remove(order.pop(0))
