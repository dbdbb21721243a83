"""The published view's job rows (:class:`~xirang_service.pool.rows.Rows`) read as the plain
dictionary they replace: every change put in, in the same order, and an earlier view unchanged
by later ones (readers hold no lock)."""

from __future__ import annotations

import random

from xirang_service.pool import rows as rows_module
from xirang_service.pool.rows import Rows


def test_rows_read_like_a_dictionary_updated_the_same_way_and_old_views_stay() -> None:
    chance = random.Random(7)
    rows, plain = Rows(), {}
    kept: list[tuple[Rows, dict]] = []
    for step in range(3000):
        ids = [chance.randrange(0, step + 2) for _ in range(chance.randrange(1, 4))]
        changed = {i: {"id": i, "step": step} for i in ids}
        rows, plain = rows.updated(changed), {**plain, **changed}
        if step % 97 == 0:
            kept.append((rows, plain))
    for view, expected in [*kept, (rows, plain)]:
        assert list(view.values()) == list(expected.values())  # same rows, same order
        assert len(view) == len(expected)
        assert all(view[i] == row and i in view for i, row in expected.items())
        assert view.get(-1) is None and -1 not in view


def test_a_change_copies_the_changed_rows_not_every_job(monkeypatch) -> None:
    monkeypatch.setattr(rows_module, "FOLD_AT", 8)
    rows = Rows({i: {"id": i} for i in range(10_000)})
    changed = rows.updated({5: {"id": 5, "state": "cancelled"}})
    assert changed._base is rows._base  # the 10,000 rows are shared, not copied
    assert changed[5]["state"] == "cancelled" and "state" not in rows[5]
