"""The quality gate: every sample passes the rules or goes to quarantine with its reason.

Rules run in the order listed here, and the first that fails names the reason: ``not_json``,
``missing_field``, ``not_utf8`` (its bytes did not decode), ``nul_bytes`` (a NUL in the text:
UTF-16 read as UTF-8, a binary file), ``control_chars`` (more than ``CONTROL_SHARE`` of it
control characters other than whitespace), ``empty``, ``too_short``, ``too_long``,
``duplicate`` (same content hash as an earlier sample), then the user rule
(``module:function`` taking the sample and returning ``None`` or a reason). A sample that
fails never reaches a training shard.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from xirang import DataError
from xirang.specs import import_target

EXAMPLES_PER_REASON = 3
#: the share of a text's characters that may be control characters (escape codes, form feeds)
CONTROL_SHARE = 0.01
#: C0 controls other than tab, newline, vertical tab, form feed and carriage return, and DEL
_CONTROLS = dict.fromkeys([*range(0, 9), *range(14, 32), 127])
EXAMPLE_CHARS = 80
#: files named per reason in the report (every one is in the quarantine shard's ``source``)
FILES_PER_REASON = 20


@dataclass(frozen=True)
class Rules:
    """Configurable rules (``conf/data/*.yaml`` ``quality:`` and ``xirang data prepare`` flags)."""

    field: str = "text"
    min_chars: int = 1
    max_chars: int = 0  # 0 = no limit
    dedup: bool = True
    rule: str = ""  # "module:function", sample -> reason or None


@dataclass
class Report:
    """Counts per reason and a few examples of each; what ``prepare`` prints at the end."""

    accepted: int = 0
    reasons: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    #: the files whole-file samples came from, per reason: what a user looks for to fix them
    files: dict[str, list[str]] = field(default_factory=dict)

    def add(self, reason: str, sample: dict[str, Any], key: str) -> None:
        self.reasons[reason] += 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES_PER_REASON:
            shown.append(_preview(sample.get(key)))
        named = self.files.setdefault(reason, [])
        if sample.get("source") and len(named) < FILES_PER_REASON:
            named.append(str(sample["source"]))

    @property
    def quarantined(self) -> int:
        return sum(self.reasons.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "quarantined": self.quarantined,
            "reasons": dict(sorted(self.reasons.items())),
            "examples": self.examples,
            "files": {reason: names for reason, names in self.files.items() if names},
        }


class Gate:
    """Applies :class:`Rules` to a stream of samples; remembers hashes for de-duplication."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        self.seen: set[bytes] = set()
        self.user_rule: Callable[[dict[str, Any]], str | None] | None = None
        if rules.rule:
            try:
                self.user_rule = import_target(rules.rule)
            except Exception as exc:
                raise DataError(f"quality rule {rules.rule!r} cannot be imported: {exc}") from None

    def reason(self, sample: dict[str, Any]) -> str | None:
        """Why ``sample`` must be quarantined, or ``None`` when it may train."""
        if "_error" in sample:
            return "not_json"
        value = sample.get(self.rules.field)
        if value is None:
            return "missing_field"
        if isinstance(value, bytes):
            return "not_utf8"
        if isinstance(value, str) and (problem := control_problem(value)):
            return problem
        size = len(value)
        if size == 0 or (isinstance(value, str) and not value.strip()):
            return "empty"
        if size < self.rules.min_chars:
            return "too_short"
        if self.rules.max_chars and size > self.rules.max_chars:
            return "too_long"
        if self.rules.dedup and self._duplicate(value):
            return "duplicate"
        return self.user_rule(sample) if self.user_rule else None

    def _duplicate(self, value: Any) -> bool:
        data = content_bytes(value)
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if digest in self.seen:
            return True
        self.seen.add(digest)
        return False


def control_problem(text: str) -> str | None:
    """``nul_bytes`` or ``control_chars`` when ``text`` is not text a model should learn."""
    if "\x00" in text:
        return "nul_bytes"
    controls = len(text) - len(text.translate(_CONTROLS))
    return "control_chars" if controls > CONTROL_SHARE * len(text) else None


def content_bytes(value: Any) -> bytes:
    """The bytes a sample's value is hashed and sized by (text, bytes, arrays, lists)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if hasattr(value, "tobytes"):
        return value.tobytes()
    return repr(value).encode()


def quarantine_row(sample: dict[str, Any], reason: str, key: str) -> dict[str, Any]:
    """The row a quarantine shard keeps: the sample's text (made printable), the reason and the
    file a whole-file sample came from (empty for a row of a JSONL, Parquet or lines file)."""
    value = sample.get(key)
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = "" if value is None else str(value)
    return {"text": text, "reason": reason, "source": str(sample.get("source") or "")}


def _preview(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    text = "" if value is None else str(value)
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"
