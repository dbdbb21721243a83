"""Kueue manifests validate against the Kubernetes schema, and bad ones are refused."""

from __future__ import annotations

import copy

import pytest
from xirang_kubernetes.manifests import RunManifest, jobset, kueue_queues, pytorchjob
from xirang_kubernetes.scheduler import KubernetesScheduler
from xirang_kubernetes.validate import ManifestError, validate

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
    KubernetesScheduler(kind="PyTorchJob").launch(job, print)
    text = (tmp_path / "2026-01-01_12-00-00" / "k8s" / "run.yaml").read_text()
    assert "kind: PyTorchJob" in text and "--nproc_per_node=2" in text
