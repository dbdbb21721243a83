"""torchrun's multi-node settings are checked before any worker starts: the batch is split over
every node's workers, and a node rank, endpoint or restart count that cannot form one job is one
clear ConfigError naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from xirang_local.nodes import Nodes

from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.specs import JobSpec

TWO_NODES = ("parallel=ddp", "trainer.nnodes=2", "trainer.rdzv_endpoint=node0:29500")


def test_the_global_batch_is_split_over_the_workers_of_every_node() -> None:
    trainer = compose((*TWO_NODES, "trainer.nproc=2", "trainer.global_batch=16"))["trainer"]
    assert trainer["micro_batch"] == 4  # 16 sequences over 2 nodes x 2 workers


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("trainer.node_rank=2",), "trainer.node_rank=2: must be in 0..1"),
        (("trainer.rdzv_endpoint=node0",), "trainer.rdzv_endpoint='node0': trainer.nnodes=2"),
        (("trainer.rdzv_endpoint=node0:99999",), "needs node 0's address as host:port"),
        (("trainer.max_restarts=1",), "trainer.max_restarts=1: restarts are one node's"),
        (("trainer.global_batch=3",), "does not divide over trainer.nproc=1 x trainer.nnodes=2"),
        (("parallel=single",), "parallel=single runs a single process but the run has 2"),
        (("scheduler=slurm",), "scheduler=slurm places its nodes itself"),
        (("trainer.nnodes=0",), "trainer.nnodes=0: must be at least 1"),
    ],
)
def test_settings_that_cannot_form_one_job_are_refused(
    overrides: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        compose((*TWO_NODES, *overrides))
    assert message in str(error.value)


def test_one_node_needs_no_endpoint() -> None:
    assert compose(("trainer.nnodes=1",))["trainer"]["rdzv_endpoint"] == ""


def test_a_timestamped_run_directory_is_refused_for_several_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XIRANG_RUNS", str(tmp_path / "outputs"))
    stamped = tmp_path / "outputs" / "2026-12-01" / "15-00-00"
    nodes = Nodes.of_job(JobSpec(str(stamped), 1, nnodes=2, rdzv_endpoint="node0:29500"))
    with pytest.raises(ConfigError, match=r"Add hydra\.run\.dir=<folder on a filesystem every"):
        nodes.check_run_dir(str(stamped))
    nodes.check_run_dir(str(tmp_path / "shared" / "run"))  # a named folder is fine


def test_every_node_derives_the_same_rendezvous_and_only_node_0_hosts_it() -> None:
    run_dir = "/shared/runs/llm"
    settings = [
        Nodes.of_job(
            JobSpec(run_dir, 4, nnodes=3, node_rank=r, rdzv_endpoint="n0:1")
        ).launch_settings(run_dir)
        for r in range(3)
    ]
    assert len({s["run_id"] for s in settings}) == 1
    assert [s["rdzv_configs"]["is_host"] for s in settings] == [True, False, False]
    assert {(s["min_nodes"], s["max_nodes"], s["rdzv_endpoint"]) for s in settings} == {
        (3, 3, "n0:1")
    }
