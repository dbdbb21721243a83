"""Kubernetes with Kueue (``scheduler=kubernetes``): manifests for a Kueue-managed JobSet or
PyTorchJob with the ResourceFlavor and topology settings, plus the Kueue queue objects for the
pool's projects, validated against the Kubernetes schema before they are written."""

from xirang import conf_folder, hookimpl
from xirang.specs import SchedulerSpec


@hookimpl
def xirang_schedulers() -> list[SchedulerSpec]:
    return [
        SchedulerSpec(
            name="kubernetes",
            target="xirang_kubernetes.scheduler:KubernetesScheduler",
            schema="xirang_kubernetes.scheduler:KubernetesConfig",
            description="write validated Kueue JobSet/PyTorchJob manifests for the run",
            requires=("kubernetes_validate",),
            install="pip install 'xirang[kubernetes]'",
        )
    ]


@hookimpl
def xirang_config_search_paths() -> list[str]:
    return conf_folder(__file__)
