"""``scheduler=kubernetes``: the run's manifests, validated and written to its directory.

``k8s/run.yaml`` holds, in apply order, the shared volume claim, the run's config as a
ConfigMap, a headless Service (JobSet) and the Kueue-managed JobSet or PyTorchJob whose pods
run torchrun over ``trainer.nnodes`` nodes of ``trainer.nproc`` workers. No cluster is
contacted unless ``scheduler.apply=true``, which runs ``kubectl apply -f`` on it (and refuses
plainly where kubectl is not installed).
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from xirang import ConfigError, XirangError
from xirang.specs import JobSpec, SchedulerBase
from xirang_kubernetes.manifests import (
    CONFIG_MOUNT,
    RunManifest,
    headless_service,
    jobset,
    pytorchjob,
    run_config,
    run_volume,
)
from xirang_kubernetes.validate import ManifestError, validate

#: how to get an image with xirang in it (docs/multinode.md)
IMAGE_HOW = (
    "build one from a checkout with docker build -f plugins/xirang_kubernetes/Dockerfile "
    "-t <registry>/xirang:<tag> . and push it"
)


@dataclass
class KubernetesConfig:
    kind: str = "JobSet"
    image: str = ""
    namespace: str = "default"
    queue: str = ""
    priority_class: str = ""
    device_type: str = "cpu"
    topology_level: str = "kubernetes.io/hostname"
    topology_required: bool = False
    volume_claim: str = "xirang-runs"
    volume_size: str = "100Gi"
    storage_class: str = ""
    mount: str = "/runs"
    port: int = 29500
    apply: bool = False


BUILDERS = {"JobSet": jobset, "PyTorchJob": pytorchjob}
#: settings of the config that are not the RunManifest's
_OWN = ("kind", "volume_size", "storage_class", "apply")


class KubernetesScheduler(SchedulerBase):
    detached = True  # writes the manifest for kubectl; the run happens in the cluster

    def __init__(self, **settings: Any) -> None:
        self.config = KubernetesConfig(**settings)
        if self.config.kind not in BUILDERS:
            raise ManifestError(
                f"scheduler.kind={self.config.kind!r}; choose one of {', '.join(BUILDERS)}"
            )
        if not self.config.image:
            raise ConfigError(
                "scheduler.image: the pods need an image with xirang installed; "
                f"{IMAGE_HOW}, then set scheduler.image=<registry>/xirang:<tag>"
            )

    def manifests(self, job: JobSpec) -> list[dict[str, Any]]:
        """Every object the run needs, each validated, in the order they are applied."""
        name = "xirang-" + Path(job.run_dir).name.lower().replace("_", "-")[-40:].strip("-")
        settings = {k: v for k, v in vars(self.config).items() if k not in _OWN}
        run = RunManifest(
            name, job.project, (), nodes=job.nnodes, procs_per_node=job.nproc, **settings
        )
        run = replace(run, command=("/bin/sh", "-c", self._script(run, job)))
        config_text = (Path(job.run_dir) / "config.yaml").read_text()
        objects = [
            run_volume(run, self.config.volume_size, self.config.storage_class),
            run_config(run, config_text),
        ]
        if self.config.kind == "JobSet":
            objects.append(headless_service(run))
        objects.append(BUILDERS[self.config.kind](run))
        for obj in objects:
            validate(obj)
        return objects

    def _script(self, run: RunManifest, job: JobSpec) -> str:
        """Each pod: the run directory on the shared volume, the config copied in (atomically:
        the pods of every node do it), then torchrun as node <completion index> of nnodes."""
        run_dir = f"{run.mount}/{run.name}"
        code = "import sys; from xirang_core.train.worker import main; main(sys.argv[1])"
        torchrun = ["torchrun", f"--nproc_per_node={job.nproc}"]
        if self.config.kind == "JobSet":  # a PyTorchJob's operator sets torchrun's PET_* env
            torchrun += [
                f"--nnodes={job.nnodes}",
                "--node_rank=${JOB_COMPLETION_INDEX:-0}",
                "--rdzv_backend=c10d",
                f"--rdzv_endpoint={run.rendezvous_host}:{run.port}",
                f"--rdzv_id={run.name}",
            ]
        torchrun += ["--no-python", "python", "-c", shlex.quote(code), shlex.quote(run_dir)]
        staged = shlex.quote(f"{run_dir}/.config.yaml.") + '"$HOSTNAME"'
        return "\n".join(
            [
                "set -e",
                f"mkdir -p {shlex.quote(run_dir)}",
                f"cp {CONFIG_MOUNT}/config.yaml {staged}",
                f"mv -f {staged} {shlex.quote(run_dir + '/config.yaml')}",
                "exec " + " ".join(torchrun),
            ]
        )

    def launch(self, job: JobSpec, entrypoint: Callable[[str], Any]) -> None:
        out = Path(job.run_dir) / "k8s" / "run.yaml"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump_all(self.manifests(job), sort_keys=False))
        if not self.config.apply:
            print(
                f"kubernetes: validated {self.config.kind} written to {out}; "
                f"submit with: kubectl apply -f {out}"
            )
            return
        apply_manifests(out)


def apply_manifests(path: Path) -> None:
    """``kubectl apply -f path`` against the current kubectl context."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        raise XirangError(
            f"scheduler.apply=true needs kubectl on PATH (not found); the manifests are in "
            f"{path}: install kubectl and run kubectl apply -f {path}, or leave "
            f"scheduler.apply=false"
        )
    done = subprocess.run([kubectl, "apply", "-f", str(path)], capture_output=True, text=True)
    if done.returncode:
        raise XirangError(f"kubectl apply -f {path} failed: {done.stderr.strip()}")
    print(done.stdout.strip())
