"""Small HTML building blocks for the console pages (escaped, no template engine needed)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any

STYLE = """
body{font:14px system-ui,sans-serif;margin:0;color:#111}
header{background:#1f2937;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#e5e7eb;text-decoration:none}header .who{margin-left:auto}
header form{display:inline;margin:0}
header button{background:none;border:0;padding:0;color:#e5e7eb;font:inherit;cursor:pointer}
main{padding:12px 16px}h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;margin:4px 0}td,th{border:1px solid #ddd;padding:2px 8px}
th{background:#f3f4f6;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#e5e7eb;width:120px;height:10px;display:inline-block}
.bar span{background:#2563eb;height:10px;display:block}
.warn{color:#b45309}.limit,.bad{color:#b91c1c}.charts{display:flex;flex-wrap:wrap;gap:12px}
"""


def page(title: str, who: str, body: str, csrf: str = "") -> str:
    """A whole page with the navigation bar; ``who`` is the viewer's display name, ``csrf``
    their session's CSRF token (a session's pages offer a log-out button that posts it)."""
    nav = "".join(
        f'<a href="{href}">{label}</a>'
        for href, label in (
            ("/", "Overview"),
            ("/jobs", "Queue"),
            ("/nodes", "Nodes"),
            ("/cost", "Cost"),
        )
    )
    user = f'<span class="who">{escape(who)}{logout_form(csrf)}</span>' if who else ""
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)} · xirang</title>"
        f"<style>{STYLE}</style></head><body><header><b>xirang</b>{nav}{user}</header>"
        f'<main><h1 style="font-size:20px">{escape(title)}</h1>{body}</main></body></html>'
    )


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], table_id: str = "") -> str:
    """A table; numbers are right-aligned, every cell escaped unless it is :class:`Raw`."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in rows)
    ident = f' id="{escape(table_id)}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class Raw(str):
    """Markup that is already safe (a bar, a link built here)."""


def _cell(value: Any) -> str:
    if isinstance(value, Raw):
        return f"<td>{value}</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (
            f'<td class="n">{value:,}</td>'
            if isinstance(value, int)
            else f'<td class="n">{value:,.2f}</td>'
        )
    return f"<td>{escape('' if value is None else str(value))}</td>"


def bar(fraction: float) -> Raw:
    pct = max(0.0, min(1.0, fraction)) * 100
    return Raw(f'<span class="bar"><span style="width:{pct:.0f}%"></span></span> {pct:.0f}%')


def pager(path: str, page_no: int, total: int, size: int) -> str:
    """Links to the previous and next page of a long list."""
    pages = max(1, -(-total // size))
    links = []
    if page_no > 1:
        links.append(f'<a href="{path}?page={page_no - 1}">previous</a>')
    if page_no < pages:
        links.append(f'<a href="{path}?page={page_no + 1}">next</a>')
    return f"<p>page {page_no} of {pages} ({total:,} in all) {' '.join(links)}</p>"


def logout_form(csrf: str) -> str:
    """The log-out button: a POST with the session's CSRF token (a link would let any page
    log the viewer out); none without a session (a bearer token has nothing to end)."""
    if not csrf:
        return ""
    return (
        " · <form method=post action=/logout id=logout-form>"
        f'<input type=hidden name=csrf value="{escape(csrf)}">'
        "<button type=submit id=logout>log out</button></form>"
    )


def login_form(csrf: str, message: str = "") -> str:
    """The log-in page; ``csrf`` repeats the log-in CSRF cookie (double submit)."""
    note = f'<p class="bad">{escape(message)}</p>' if message else ""
    return page(
        "Log in",
        "",
        f"{note}<form method=post action=/login>"
        f'<input type=hidden name=csrf value="{escape(csrf)}">'
        "<label>Project or operator token "
        "<input type=password name=token id=token autocomplete=off></label> "
        "<button type=submit id=login>Log in</button></form>",
    )
