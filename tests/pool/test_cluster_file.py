"""Cluster files: the documented CPU pool builds, and a file of the wrong shape is one error
naming the entry, never a traceback (``nodes: 5`` once crashed ``xirang pool serve``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from xirang_service.pool import clusterfile
from xirang_service.pool.errors import PoolError

DOCS = Path(__file__).parents[2] / "docs" / "pool.md"


def test_the_documented_cpu_pool_builds() -> None:
    section = DOCS.read_text().split("### Cluster files", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert example is not None
    cluster, _, quotas = clusterfile.build(yaml.safe_load(example[1]))
    assert (cluster.types, cluster.size) == (["cpu"], 2)
    assert sorted(quotas.projects) == ["nlp", "vision"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nodes: 5", "nodes: 5 is not a list of mappings"),
        ("nodez: []", "unknown section 'nodez'"),
        ("groups: [{type: a, nodes: x}]", "groups[0]: invalid literal"),
        ("nodes: [{name: a, devices: 1}]\nprojects: [5]", "projects[0]: 5 is not a mapping"),
        ("nodes: [{name: a, devices: 1}]\nprojects: [{name: p, size: 1}]", "projects[0]:"),
        ("nodes: [{name: a, devices: 1}]\nthroughputs: {reference: b}", "throughputs:"),
    ],
)
def test_a_wrong_shape_is_one_error_naming_the_entry(text: str, says: str) -> None:
    with pytest.raises(PoolError, match=re.escape(says)):
        clusterfile.build(yaml.safe_load(text))


def test_pool_serve_refuses_it_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("nodes: 5\n")
    command = [sys.executable, "-m", "xirang", "pool", "serve", "--cluster", "bad.yaml"]
    command += ["--state", str(tmp_path / "pool.db"), "--port", "0"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("xirang error: cluster file: nodes: 5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]  # nothing created
