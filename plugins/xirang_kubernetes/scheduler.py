"""``scheduler=kubernetes``: the run's Kueue manifests, validated and written to its directory.

No cluster is contacted: the manifests (``k8s/run.yaml``) are ready for ``kubectl apply -f``
on a cluster with Kueue and the JobSet or Kubeflow training operator installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from xirang_core.specs import JobSpec
from xirang_kubernetes.manifests import RunManifest, jobset, pytorchjob
from xirang_kubernetes.validate import ManifestError, validate


@dataclass
class KubernetesConfig:
    kind: str = "JobSet"
    image: str = "python:3.11"
    namespace: str = "default"
    queue: str = ""
    priority_class: str = ""
    device_type: str = "cpu"
    nodes: int = 1
    topology_level: str = "kubernetes.io/hostname"
    topology_required: bool = False


BUILDERS = {"JobSet": jobset, "PyTorchJob": pytorchjob}


class KubernetesScheduler:
    detached = True  # writes the manifest for kubectl; the run happens in the cluster

    def __init__(self, **settings: Any) -> None:
        self.config = KubernetesConfig(**settings)
        if self.config.kind not in BUILDERS:
            raise ManifestError(
                f"scheduler.kind={self.config.kind!r}; choose one of {', '.join(BUILDERS)}"
            )

    def manifest(self, job: JobSpec) -> dict[str, Any]:
        name = "xirang-" + Path(job.run_dir).name.lower().replace("_", "-")[-50:].strip("-")
        code = "import sys; from xirang_core.train.worker import main; main(sys.argv[1])"
        settings = {k: v for k, v in vars(self.config).items() if k != "kind"}
        run = RunManifest(
            name=name,
            project=job.project,
            procs_per_node=job.nproc,
            command=(
                "torchrun",
                f"--nproc_per_node={job.nproc}",
                "--no-python",
                "python",
                "-c",
                code,
                job.run_dir,
            ),
            **settings,
        )
        manifest = BUILDERS[self.config.kind](run)
        validate(manifest)
        return manifest

    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        out = Path(job.run_dir) / "k8s" / "run.yaml"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(self.manifest(job), sort_keys=False))
        print(
            f"kubernetes: validated {self.config.kind} written to {out}; "
            f"submit with: kubectl apply -f {out}"
        )
