"""Kueue manifests validate against the Kubernetes schema, and bad ones are refused."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
from xirang_kubernetes.manifests import RunManifest, jobset, kueue_queues, pytorchjob
from xirang_kubernetes.scheduler import KubernetesScheduler
from xirang_kubernetes.validate import ManifestError, validate

from xirang_core.config import compose
from xirang_core.errors import ConfigError, XirangError
from xirang_core.specs import JobSpec

RUN = RunManifest(
    name="xirang-bert",
    project="nlp",
    command=("torchrun", "train.py"),
    device_type="cuda",
    nodes=2,
    procs_per_node=8,
    priority_class="high",
    topology_level="cloud.google.com/gce-topology-block",
    topology_required=True,
)


@pytest.mark.parametrize("build", [jobset, pytorchjob])
def test_workloads_carry_kueue_queue_flavor_and_topology(build) -> None:
    manifest = build(RUN)
    validate(manifest)
    labels = manifest["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "nlp-queue"
    assert labels["kueue.x-k8s.io/priority-class"] == "high"
    text = str(manifest)
    assert "kueue.x-k8s.io/podset-required-topology" in text
    assert "'xirang.io/device-type': 'cuda'" in text and "nvidia.com/gpu" in text


def test_queues_for_projects_validate_and_lend_within_the_team() -> None:
    objects = kueue_queues(
        [{"name": "nlp", "guaranteed": 8, "borrow_limit": 4, "team": "research"}],
        {"cuda": 16, "cpu": 16},
    )
    for obj in objects:
        validate(obj)
    queue = next(o for o in objects if o["kind"] == "ClusterQueue")
    assert queue["spec"]["cohort"] == "research"
    assert queue["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    quotas = {f["name"]: f["resources"] for f in queue["spec"]["resourceGroups"][0]["flavors"]}
    assert {q["name"]: q["nominalQuota"] for q in quotas["cuda"]} == {"cpu": 0, "nvidia.com/gpu": 4}


def test_an_invalid_pod_field_is_caught_by_the_kubernetes_schema() -> None:
    manifest = copy.deepcopy(jobset(RUN))
    pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["imagePullPolicy"] = 7
    with pytest.raises(ManifestError, match=r"imagePullPolicy|7"):
        validate(manifest)
    pod["containers"][0].pop("imagePullPolicy")
    pod["containers"][0]["colour"] = "red"  # strict: unknown fields are errors
    with pytest.raises(ManifestError):
        validate(manifest)


def test_bad_names_and_kinds_are_refused() -> None:
    with pytest.raises(ManifestError, match="metadata/name"):
        validate(jobset(RunManifest(name="Bad_Name", project="p", command=("x",))))
    with pytest.raises(ManifestError, match=r"scheduler\.kind"):
        KubernetesScheduler(kind="Deployment")


def test_scheduler_writes_a_validated_manifest(tmp_path) -> None:
    job = JobSpec(str(tmp_path / "2026-01-01_12-00-00"), nproc=2, project="cv")
    Path(job.run_dir).mkdir()
    (Path(job.run_dir) / "config.yaml").write_text("seed: 1\n")
    KubernetesScheduler(kind="PyTorchJob", image="registry.example/xirang:1").launch(job, print)
    text = (tmp_path / "2026-01-01_12-00-00" / "k8s" / "run.yaml").read_text()
    assert "kind: PyTorchJob" in text and "--nproc_per_node=2" in text


def two_node_job(tmp_path: Path, **settings: Any) -> list[dict[str, Any]]:
    run_dir = tmp_path / "2026-12-01_15-00-00"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("trainer:\n  nnodes: 2\n")
    job = JobSpec(str(run_dir), nproc=4, project="nlp", nnodes=2)
    return KubernetesScheduler(image="registry.example/xirang:1", **settings).manifests(job)


@pytest.mark.parametrize(
    ("device", "resource"),
    [
        ("cuda", "nvidia.com/gpu"),
        ("rocm", "amd.com/gpu"),
        ("ascend", "huawei.com/Ascend910"),
        ("cpu", "cpu"),
    ],
)
def test_a_multi_node_jobset_shares_a_volume_and_meets_at_its_first_pod(
    tmp_path: Path, device: str, resource: str
) -> None:
    volume, config, service, workload = two_node_job(tmp_path, device_type=device)
    assert [o["kind"] for o in (volume, config, service, workload)] == [
        "PersistentVolumeClaim",
        "ConfigMap",
        "Service",
        "JobSet",
    ]
    name = workload["metadata"]["name"]
    assert volume["spec"]["accessModes"] == ["ReadWriteMany"]
    assert config["data"]["config.yaml"] == "trainer:\n  nnodes: 2\n"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": name}
    assert workload["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": name}
    job = workload["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["parallelism"], job["completionMode"]) == (2, "Indexed")
    pod = job["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.example/xirang:1"
    assert container["resources"]["limits"] == {resource: "4"}  # every node asks for its own
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "xirang-runs"
    script = container["command"][2]
    assert f"--rdzv_endpoint={name}-workers-0-0.{name}:29500" in script
    assert "--nnodes=2" in script and "--node_rank=${JOB_COMPLETION_INDEX:-0}" in script
    assert f"/runs/{name}/config.yaml" in script
    subprocess.run(["sh", "-n", "-c", script], check=True)  # the pods' shell can parse it


def test_the_image_is_required_and_apply_needs_kubectl(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.image: the pods need an image with xirang"):
        KubernetesScheduler()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 1\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    scheduler = KubernetesScheduler(image="xirang:1", apply=True)
    with pytest.raises(XirangError, match="needs kubectl on PATH"):
        scheduler.launch(JobSpec(str(run_dir), nproc=1), print)
    assert (run_dir / "k8s" / "run.yaml").exists()  # written, to apply by hand


def test_the_pods_set_node_rank_and_endpoint_themselves() -> None:
    overrides = ("scheduler=kubernetes", "scheduler.image=x", "parallel=ddp")
    assert compose((*overrides, "trainer.nnodes=2"))["trainer"]["micro_batch"] == 8
    with pytest.raises(ConfigError, match="scheduler=kubernetes sets them for each pod"):
        compose((*overrides, "trainer.nnodes=2", "trainer.node_rank=1"))
