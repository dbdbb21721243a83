"""Lists answered a page at a time, as the Kubernetes list API pages them: ``?limit=N`` rows at
most (``DEFAULT_LIMIT`` when not given, never more than ``MAX_LIMIT``), and, when rows remain,
an opaque cursor in the ``X-Xirang-Continue`` answer header that the client sends back as
``?continue=`` for the next page. The answer itself stays the JSON list it always was.

A cursor holds the sort key of the last row sent (a job id, a project name), so the next page
starts after it whatever changed meanwhile: a listing of jobs by id returns every job that
existed throughout exactly once, and one submitted meanwhile at the end. Without pages one
tenant's 30 MB listing held 30 MB of the service's memory per connection, and its turn at the
service (:mod:`.turns`) lasted as long as the whole answer took to build.
"""

from __future__ import annotations

import base64
import binascii
import json
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: rows per page when the client names no limit, and the most it may ask for
DEFAULT_LIMIT, MAX_LIMIT = 500, 5000
#: a page ends once its JSON reaches this many bytes (whatever the limit; one row at least):
#: what one answer holds of the service's memory while a slow client reads it, and how long
#: another tenant's request may wait behind a page being answered (with 1 MiB, a submit
#: beside a tenant paging through 30 MB had a p99 of 72-120 ms on a loaded machine; with
#: 256 KiB, 44-62 ms)
MAX_PAGE_BYTES = 256 * 1024
#: the answer header holding the next page's cursor (absent on the last page)
CONTINUE_HEADER = "X-Xirang-Continue"

Key = Callable[[dict[str, Any]], Any]


class BadCursor(ValueError):
    """A ``continue`` value this list never gave (edited, or another list's)."""


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    #: the cursor of the next page, "" on the last
    next: str = ""


def body(found: Page, key: Key, kind: str, encode_row: Callable[[Any], bytes]) -> tuple[bytes, str]:
    """``found``'s JSON body, ended early once it would pass :data:`MAX_PAGE_BYTES` (the
    cursor then resumes after the last row it holds), and the next page's cursor."""
    parts: list[bytes] = []
    size = 2
    for row in found.rows:
        part = encode_row(row)
        if parts and size + len(part) > MAX_PAGE_BYTES:
            return b"[" + b",".join(parts) + b"]", encode(kind, key(found.rows[len(parts) - 1]))
        parts.append(part)
        size += len(part) + 1
    return b"[" + b",".join(parts) + b"]", found.next


def page(rows: Sequence[dict[str, Any]], key: Key, limit: int, cursor: str, kind: str) -> Page:
    """The page of ``rows`` (sorted by ``key``, ascending) after ``cursor``, ``limit`` rows at
    most; ``kind`` names the list, so a cursor of another list is refused, not misread."""
    start = 0
    if cursor:
        after = decode(cursor, kind)
        try:
            start = bisect_right(rows, after, key=lambda row: _comparable(key(row)))
        except TypeError:  # a key of another type than this list's: not one it gave
            raise BadCursor(_BAD) from None
    chosen = list(rows[start : start + limit])
    more = start + limit < len(rows)
    return Page(chosen, encode(kind, key(chosen[-1])) if more and chosen else "")


def encode(kind: str, last: Any) -> str:
    text = json.dumps([kind, last], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: str, kind: str) -> Any:
    """The last key a cursor of list ``kind`` holds; BadCursor for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        found, last = json.loads(raw)
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise BadCursor(_BAD) from None
    if found != kind:
        raise BadCursor(_BAD)
    return _comparable(last)


def _comparable(value: Any) -> Any:
    """JSON gives lists where keys were tuples: compare them as tuples."""
    return tuple(value) if isinstance(value, list) else value


_BAD = (
    "continue: not a cursor this list gave (send back the X-Xirang-Continue header of the "
    "previous page unchanged, or leave continue out to start from the first page)"
)
