"""A running pool job's training, live on ``/metrics``: step, loss, tokens/s, MFU and tokens,
from the newest record of its run's ``metrics.jsonl`` as the training loop writes it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from xirang_core.train.report import MetricsLog
from xirang_service.console.auth import OPERATOR
from xirang_service.console.prometheus import exposition
from xirang_service.pool.service import OPERATOR as POOL_OPERATOR


def families(source, who: str) -> dict:
    text = exposition(source, who)
    return {f.name: f for f in text_string_to_metric_families(text)}


def record(step: int) -> dict:
    return {"step": step, "loss": 5.0 - step / 100, "tokens": step * 4096,
            "tokens_per_s": 1234.5, "mfu": 0.41}  # fmt: skip


def test_a_running_job_exports_its_training_live(console, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    service = console.pool.service
    job = service.submit(POOL_OPERATOR, {"project": "nlp", "cards": 8, "name": "live",
                                          "payload": {"run_dir": str(run)}})  # fmt: skip
    log = MetricsLog(run)
    log.write(record(10))
    log.write({"step": 10, "val_loss": 4.2})  # an evaluation record is not a training step
    m = families(console.source, OPERATOR)
    [step] = [s for s in m["xirang_train_step"].samples if s.labels["pool_job"] == str(job["id"])]
    assert step.value == 10 and step.labels["project"] == "nlp"
    assert m["xirang_train_loss"].samples[0].value == 4.9
    assert m["xirang_train_tokens_per_second"].samples[0].value == 1234.5
    assert m["xirang_train_mfu_ratio"].samples[0].value == 0.41
    assert m["xirang_train_tokens"].type == "counter"

    log.write(record(20))
    console.source.ttl = 0.0
    console.pool.clock.now += 1  # a new snapshot, a new scrape
    m = families(console.source, OPERATOR)
    assert m["xirang_train_step"].samples[0].value == 20
    assert m["xirang_train_tokens"].samples[0].value == 20 * 4096
    assert families(console.source, "vision")["xirang_train_step"].samples == []


#: labels Prometheus sets on every series it scrapes; an exported one is renamed exported_<name>
TARGET_LABELS = {"job", "instance"}


def running_job_with_records(console, tmp_path: Path) -> dict:
    run = tmp_path / "run"
    run.mkdir()
    body = {"project": "nlp", "cards": 8, "name": "live", "payload": {"run_dir": str(run)}}
    job = console.pool.service.submit(POOL_OPERATOR, body)
    MetricsLog(run).write(record(10))
    return job


def test_no_series_carries_a_label_prometheus_sets_itself(console, tmp_path: Path) -> None:
    running_job_with_records(console, tmp_path)
    m = families(console.source, OPERATOR)
    labels = {name for f in m.values() for s in f.samples for name in s.labels}
    assert "pool_job" in labels and not labels & TARGET_LABELS, labels


def test_the_dashboard_legends_name_labels_their_series_carry(console, tmp_path: Path) -> None:
    """The shipped Grafana dashboard's legends use labels the queried metric has (``{{job}}``
    would show the scrape job's name for every pool job)."""
    running_job_with_records(console, tmp_path)
    m = families(console.source, OPERATOR)
    carried = {s.name: set(s.labels) for f in m.values() for s in f.samples}
    dashboard = Path(__file__).parents[2] / "examples" / "grafana" / "xirang-dashboard.json"
    checked = 0
    for panel in json.loads(dashboard.read_text())["panels"]:
        for target in panel["targets"]:
            [metric] = set(re.findall(r"xirang_[a-z0-9_]+", target["expr"]))
            legend = set(re.findall(r"{{(\w+)}}", target.get("legendFormat", "")))
            if metric in carried:
                assert legend <= carried[metric], (metric, legend - carried[metric])
                checked += 1
            assert not legend & TARGET_LABELS, target
    assert checked
