"""The node health view names the ranks a running pool job's balancer reported as stragglers
(``straggler`` events in the run directory the job names)."""

from __future__ import annotations

from pathlib import Path

from xirang_core.checkpoint.events import record_event
from xirang_service.console import pages
from xirang_service.console.auth import OPERATOR
from xirang_service.pool.service import OPERATOR as POOL_OPERATOR


def test_node_health_shows_a_running_jobs_straggler(console, tmp_path: Path) -> None:
    run = tmp_path / "run"
    service = console.pool.service
    job = service.submit(POOL_OPERATOR, {"project": "nlp", "cards": 8, "name": "mixed",
                                          "payload": {"run_dir": str(run)}})  # fmt: skip
    record_event(run, "save", step=10)
    assert "Stragglers" not in pages.nodes(console.source, OPERATOR, 1)
    record_event(run, "straggler", rank=3, step=40, speed_ratio=0.42, share=1, of=8, windows=3)
    console.source.ttl = 0.0
    console.pool.clock.now += 1  # a new snapshot
    html = pages.nodes(console.source, OPERATOR, 1)
    assert "Stragglers in running jobs" in html
    row = html.split('id="stragglers"')[1]
    for cell in (f">{job['id']}</a>", "mixed", ">3<", ">40<", "42%"):
        assert cell in row, cell
    assert "Stragglers" not in pages.nodes(console.source, "nlp", 1)  # operator only
