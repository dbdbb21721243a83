"""Kueue-managed manifests: JobSet or PyTorchJob for a run, and the queue objects for projects.

A run's pods share one ``ReadWriteMany`` volume (a PersistentVolumeClaim) mounted at
``mount``: the run directory (config, checkpoints, metrics, summary) and XIRANG_HOME's caches
live there, so every node writes one run and a resubmitted job resumes from its checkpoint. The
run's resolved config travels in a ConfigMap that each pod copies into the run directory. For
several nodes a headless Service gives every pod of the JobSet a DNS name; the first pod
(``<run>-workers-0-0.<run>``) hosts torchrun's c10d rendezvous and every pod passes its Indexed
Job completion index as its node rank.

Mapping of the pool's model onto Kueue: a device type is a ``ResourceFlavor`` (nodes labelled
``xirang.io/device-type``); a project is a ``ClusterQueue`` with ``nominalQuota`` (its
guaranteed cards) and ``borrowingLimit``, in a ``cohort`` named after its team, so idle quota is
lent inside the team first; a job names its ``LocalQueue`` and ``WorkloadPriorityClass`` by
label and asks for its pods to stay inside one topology domain (Kueue TAS annotations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FLAVOR_LABEL = "xirang.io/device-type"
RESOURCE = {
    "cpu": "cpu",
    "cuda": "nvidia.com/gpu",
    "rocm": "amd.com/gpu",
    "ascend": "huawei.com/Ascend910",
}


@dataclass(frozen=True)
class RunManifest:
    name: str
    project: str
    command: tuple[str, ...]
    image: str = "xirang"
    namespace: str = "default"
    queue: str = ""
    priority_class: str = ""
    device_type: str = "cpu"
    nodes: int = 1
    procs_per_node: int = 1
    topology_level: str = "kubernetes.io/hostname"
    topology_required: bool = False
    volume_claim: str = "xirang-runs"
    mount: str = "/runs"
    port: int = 29500

    @property
    def rendezvous_host(self) -> str:
        """The DNS name of the JobSet's first pod, through the run's headless Service."""
        return f"{self.name}-workers-0-0.{self.name}"


CONFIG_MOUNT = "/etc/xirang"


def resource_name(device_type: str) -> str:
    """The extended resource a device type is requested as (GPUs by vendor, else CPUs)."""
    return RESOURCE.get(device_type, "nvidia.com/gpu" if device_type != "cpu" else "cpu")


def pod_template(run: RunManifest, role: str) -> dict[str, Any]:
    """The pod template every worker uses: flavor node selector, TAS annotation, torchrun."""
    resource = resource_name(run.device_type)
    level_key = (
        "kueue.x-k8s.io/podset-required-topology"
        if run.topology_required
        else "kueue.x-k8s.io/podset-preferred-topology"
    )
    return {
        "metadata": {
            "labels": {"xirang.io/run": run.name, "xirang.io/role": role},
            "annotations": {level_key: run.topology_level},
        },
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {FLAVOR_LABEL: run.device_type},
            "containers": [
                {
                    "name": "worker",
                    "image": run.image,
                    "command": list(run.command),
                    "env": [
                        {"name": "XIRANG_PROJECT", "value": run.project},
                        {"name": "XIRANG_HOME", "value": f"{run.mount}/.xirang"},
                    ],
                    "ports": [{"name": "rendezvous", "containerPort": run.port}],
                    "resources": {
                        "limits": {resource: str(run.procs_per_node)},
                        "requests": {resource: str(run.procs_per_node)},
                    },
                    "volumeMounts": [
                        {"name": "runs", "mountPath": run.mount},
                        {"name": "config", "mountPath": CONFIG_MOUNT, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {"name": "runs", "persistentVolumeClaim": {"claimName": run.volume_claim}},
                {"name": "config", "configMap": {"name": f"{run.name}-config"}},
            ],
        },
    }


def run_volume(run: RunManifest, size: str, storage_class: str = "") -> dict[str, Any]:
    """The shared volume every run of the namespace keeps its run directory on (applying it
    again leaves an existing claim as it is)."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],  # every node's pods mount it at once
        "resources": {"requests": {"storage": size}},
    }
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": run.volume_claim, "namespace": run.namespace},
        "spec": spec,
    }


def run_config(run: RunManifest, config_text: str) -> dict[str, Any]:
    """The run's resolved config, which each pod copies into its run directory."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{run.name}-config", "namespace": run.namespace},
        "data": {"config.yaml": config_text},
    }


def headless_service(run: RunManifest) -> dict[str, Any]:
    """DNS names for the JobSet's pods (``<pod hostname>.<run>``), ready or not, so the
    rendezvous host resolves while the other pods are still starting."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": run.name, "namespace": run.namespace},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {"jobset.sigs.k8s.io/jobset-name": run.name},
            "ports": [{"name": "rendezvous", "port": run.port, "targetPort": run.port}],
        },
    }


def _labels(run: RunManifest) -> dict[str, str]:
    labels = {
        "kueue.x-k8s.io/queue-name": run.queue or f"{run.project}-queue",
        "xirang.io/project": run.project,
    }
    if run.priority_class:
        labels["kueue.x-k8s.io/priority-class"] = run.priority_class
    return labels


def jobset(run: RunManifest) -> dict[str, Any]:
    """A JobSet (jobset.x-k8s.io/v1alpha2) with one replicated Job of ``nodes`` pods."""
    job = {
        "parallelism": run.nodes,
        "completions": run.nodes,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": pod_template(run, "worker"),
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": run.name, "namespace": run.namespace, "labels": _labels(run)},
        "spec": {
            "suspend": True,  # Kueue admits (unsuspends) it
            "network": {"enableDNSHostnames": True, "subdomain": run.name},
            "failurePolicy": {"maxRestarts": 0},  # resubmit: the run resumes from its checkpoint
            "replicatedJobs": [{"name": "workers", "replicas": 1, "template": {"spec": job}}],
        },
    }


def pytorchjob(run: RunManifest) -> dict[str, Any]:
    """A Kubeflow PyTorchJob (kubeflow.org/v1): one master and ``nodes - 1`` workers."""
    specs = {
        "Master": {"replicas": 1, "restartPolicy": "Never", "template": pod_template(run, "master")}
    }
    if run.nodes > 1:
        specs["Worker"] = {
            "replicas": run.nodes - 1,
            "restartPolicy": "Never",
            "template": pod_template(run, "worker"),
        }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": run.name, "namespace": run.namespace, "labels": _labels(run)},
        "spec": {
            "runPolicy": {"suspend": True},
            "nprocPerNode": str(run.procs_per_node),
            "pytorchReplicaSpecs": specs,
        },
    }


def kueue_queues(
    projects: list[dict[str, Any]], device_types: dict[str, int], namespace: str = "default"
) -> list[dict[str, Any]]:
    """ResourceFlavors per device type; a ClusterQueue and LocalQueue per project.

    ``device_types`` maps each type to its capacity; a project's guaranteed cards are split
    over the flavors in proportion to capacity (Kueue quota is per flavor)."""
    total = sum(device_types.values()) or 1
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "ResourceFlavor",
            "metadata": {"name": t},
            "spec": {"nodeLabels": {FLAVOR_LABEL: t}},
        }
        for t in sorted(device_types)
    ]
    covered = sorted({resource_name(t) for t in device_types})
    for project in projects:
        flavors = [
            _flavor_quota(project, t, device_types[t] / total, covered)
            for t in sorted(device_types)
        ]
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "ClusterQueue",
                "metadata": {"name": project["name"]},
                "spec": {
                    "cohort": project.get("team", "default"),
                    "namespaceSelector": {},
                    "preemption": {
                        "reclaimWithinCohort": "Any",
                        "borrowWithinCohort": {"policy": "LowerPriority"},
                        "withinClusterQueue": "LowerPriority",
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": covered,
                            "flavors": flavors,
                        }
                    ],
                },
            }
        )
        objects.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta1",
                "kind": "LocalQueue",
                "metadata": {"name": f"{project['name']}-queue", "namespace": namespace},
                "spec": {"clusterQueue": project["name"]},
            }
        )
    return objects


def _flavor_quota(
    project: dict[str, Any], device_type: str, share: float, covered: list[str]
) -> dict[str, Any]:
    """One flavor's quotas: every covered resource is listed (a Kueue rule), the flavor's own
    resource gets its share of the project's guaranteed cards, the others zero."""
    own = resource_name(device_type)
    resources = []
    for resource in covered:
        quota: dict[str, Any] = {
            "name": resource,
            "nominalQuota": int(project.get("guaranteed", 0) * share) if resource == own else 0,
        }
        if project.get("borrow_limit") is not None:
            quota["borrowingLimit"] = project["borrow_limit"]
        resources.append(quota)
    return {"name": device_type, "resources": resources}
