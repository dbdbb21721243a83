"""No Slurm job runs that the pool does not know of: a pool that died between sbatch and
storing the Slurm job id finds the job after its restart by the name it stored before sbatch
(its intent), tracks it to its end and frees its devices then; older jobs under the same name
are cancelled, and a name Slurm has no job under is reported failed. Real single-node Slurm."""

from __future__ import annotations

import json
import pwd
import time
from pathlib import Path

from xirang_slurm import commands
from xirang_slurm.executor import INTENT, SlurmExecutor

from tests.plugins.xirang_slurm.test_pool_service import OPERATOR, account  # noqa: F401
from xirang_service.pool.service import OPERATOR as OPERATOR_WHO
from xirang_service.pool.service import PoolService
from xirang_service.pool.store import PoolStore


def test_a_job_whose_id_was_never_stored_is_found_by_its_name_after_a_restart(
    slurm: str,
    tmp_path: Path,
    account: str,  # noqa: F811
) -> None:
    cluster = tmp_path / "cluster.yaml"
    nodes = [{"name": slurm, "type": "cpu", "devices": 1}]
    cluster.write_text(
        json.dumps({"nodes": nodes, "projects": [{"name": "nlp", "run_as": account}]})
    )
    marker = Path(pwd.getpwnam(account).pw_dir) / "ran"
    store = PoolStore(tmp_path / "pool.db")
    keep = store.save_handle

    def lose_the_id(job_id: int, handle: str) -> None:
        """The pool dies after sbatch answered, before the id is written: only the intent
        (stored before sbatch) reaches the store."""
        if not handle.startswith(INTENT):
            raise RuntimeError("killed before the write")
        keep(job_id, handle)

    store.save_handle = lose_the_id  # type: ignore[method-assign]
    first = PoolService(store, cluster, "priority", OPERATOR, SlurmExecutor(tmp_path / "a"))
    command = ["bash", "-c", f"sleep 6; echo ok > {marker}"]
    job = first.submit(
        OPERATOR_WHO, {"project": "nlp", "cards": 1, "payload": {"command": command}}
    )
    first.settle()  # its actor thread made the sbatch
    slurm_id = first.executor.slurm_ids[job["id"]]  # type: ignore[attr-defined]
    name = store.handles()[job["id"]]
    assert name.startswith(f"{INTENT}{store.meta('store_id')}-{job['id']}-")
    first.close()  # the pool is gone; its Slurm job runs on
    restarted = PoolService(
        PoolStore(tmp_path / "pool.db"), None, "priority", OPERATOR, SlurmExecutor(tmp_path / "b")
    )
    try:
        deadline = time.monotonic() + 120
        while restarted.job(OPERATOR_WHO, job["id"])["state"] not in ("done", "failed"):
            assert time.monotonic() < deadline, "the adopted job never ended"
            restarted.tick()
            time.sleep(0.5)
        assert restarted.job(OPERATOR_WHO, job["id"])["state"] == "done"
        assert marker.read_text().strip() == "ok"  # it ran to its end, not cancelled
        assert commands.job_state(slurm_id)[0] == "COMPLETED"
        assert restarted.status(OPERATOR_WHO)["types"]["cpu"]["free"] == 1
    finally:
        commands.cancel(slurm_id)
        restarted.close()


def test_the_newest_job_of_a_name_is_tracked_older_ones_cancelled_none_is_failed(
    slurm: str, tmp_path: Path
) -> None:
    name = f"{INTENT}7-{time.time_ns():x}"
    ids = [
        commands.run("sbatch", "--parsable", f"--job-name={name}", "--wrap", "sleep 60")
        .strip()
        .split(";")[0]
        for _ in range(2)
    ]
    executor = SlurmExecutor(tmp_path)
    try:
        executor.adopt({7: name, 8: f"{INTENT}8-never-submitted"})
        assert executor.poll() == [(8, False)]
        assert executor.slurm_ids == {7: ids[1]}
        deadline = time.monotonic() + 60
        while commands.job_state(ids[0])[0] not in ("CANCELLED", "UNKNOWN"):
            assert time.monotonic() < deadline, "the older job of the name was not cancelled"
            time.sleep(0.5)
    finally:
        for slurm_id in ids:
            commands.cancel(slurm_id)
