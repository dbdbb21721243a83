"""Every relative link in README.md and docs/*.md leads to a file (a newcomer follows them)."""

from __future__ import annotations

import re

from tests.docs.collect import documents

_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s#]+)(?:#[^)]*)?\)")


def test_every_relative_link_leads_to_a_file() -> None:
    broken = [
        f"{page.name}: {target}"
        for page in documents()
        for target in _LINK.findall(page.read_text())
        if not (page.parent / target).exists()
    ]
    assert not broken
