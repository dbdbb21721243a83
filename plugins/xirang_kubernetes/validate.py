"""Validation of generated manifests, since no cluster runs here to refuse a bad one.

Every embedded workload template is checked against the official Kubernetes OpenAPI schema
(``kubernetes-validate``, strict: unknown fields are errors): a JobSet's replicated Jobs as
``batch/v1 Job``, a PyTorchJob's replica templates as ``v1 PodTemplate``. The custom resources'
own envelopes (JobSet, PyTorchJob, Kueue objects) are checked against the required structure
of their CRDs with JSON Schema.
"""

from __future__ import annotations

from typing import Any

import jsonschema

from xirang import XirangError

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class ManifestError(XirangError):
    """A generated manifest would be refused by the Kubernetes API server."""


def _envelope(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "kind": {"const": kind},
            "metadata": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63}},
            },
            "spec": spec,
        },
    }


_QUOTA = {
    "type": "object",
    "required": ["name", "nominalQuota"],
    "properties": {
        "nominalQuota": {"type": "integer", "minimum": 0},
        "borrowingLimit": {"type": "integer", "minimum": 0},
    },
}
CRD_SCHEMAS: dict[str, dict[str, Any]] = {
    "JobSet": _envelope(
        "JobSet",
        {
            "type": "object",
            "required": ["replicatedJobs"],
            "properties": {
                "replicatedJobs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "template"],
                        "properties": {"replicas": {"type": "integer", "minimum": 1}},
                    },
                }
            },
        },
    ),
    "PyTorchJob": _envelope(
        "PyTorchJob",
        {
            "type": "object",
            "required": ["pytorchReplicaSpecs"],
            "properties": {
                "pytorchReplicaSpecs": {
                    "type": "object",
                    "required": ["Master"],
                    "propertyNames": {"enum": ["Master", "Worker"]},
                    "additionalProperties": {
                        "type": "object",
                        "required": ["replicas", "template"],
                    },
                }
            },
        },
    ),
    "ResourceFlavor": _envelope("ResourceFlavor", {"type": "object"}),
    "ClusterQueue": _envelope(
        "ClusterQueue",
        {
            "type": "object",
            "required": ["resourceGroups"],
            "properties": {
                "preemption": {
                    "type": "object",
                    "properties": {
                        "reclaimWithinCohort": {"enum": ["Never", "LowerPriority", "Any"]},
                        "withinClusterQueue": {
                            "enum": ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
                        },
                    },
                },
                "resourceGroups": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["coveredResources", "flavors"],
                        "properties": {
                            "flavors": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["name", "resources"],
                                    "properties": {"resources": {"type": "array", "items": _QUOTA}},
                                },
                            }
                        },
                    },
                },
            },
        },
    ),
    "LocalQueue": _envelope("LocalQueue", {"type": "object", "required": ["clusterQueue"]}),
}


#: core objects, validated whole against the Kubernetes schema
CORE_KINDS = ("PersistentVolumeClaim", "ConfigMap", "Service")


def validate(manifest: dict[str, Any], version: str = "") -> None:
    """Raise ManifestError naming the first problem in ``manifest``."""
    import kubernetes_validate

    kind = manifest.get("kind", "")
    if kind not in CRD_SCHEMAS and kind not in CORE_KINDS:
        known = ", ".join((*CRD_SCHEMAS, *CORE_KINDS))
        raise ManifestError(f"cannot validate kind {kind!r}; known: {known}")
    if kind in CRD_SCHEMAS:
        try:
            jsonschema.validate(manifest, CRD_SCHEMAS[kind])
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            raise ManifestError(f"{kind} {where or '(top)'}: {exc.message}") from None
    version = version or kubernetes_validate.latest_version()
    objects = [(kind, manifest)] if kind in CORE_KINDS else _embedded(manifest)
    for label, obj in objects:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.path)
            raise ManifestError(f"{kind} {label} {where}: {exc.message}") from None


def _embedded(manifest: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The core Kubernetes objects a custom resource embeds, as standalone objects."""
    name = manifest["metadata"]["name"]
    if manifest["kind"] == "JobSet":
        return [
            (
                f"replicatedJobs[{r['name']}]",
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": name},
                    **r["template"],
                },
            )
            for r in manifest["spec"]["replicatedJobs"]
        ]
    if manifest["kind"] == "PyTorchJob":
        return [
            (
                f"pytorchReplicaSpecs[{role}]",
                {
                    "apiVersion": "v1",
                    "kind": "PodTemplate",
                    "metadata": {"name": name},
                    "template": spec["template"],
                },
            )
            for role, spec in manifest["spec"]["pytorchReplicaSpecs"].items()
        ]
    return []
