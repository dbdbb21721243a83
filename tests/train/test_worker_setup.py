"""What a worker sets up before training: the CUDA allocator's setting, the process group's
timeout and device."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from xirang_core.config import compose
from xirang_core.errors import ConfigError
from xirang_core.train.worker import CUDA_ALLOC_CONF, allocator_defaults, group_options


def test_a_cuda_worker_starts_with_expandable_segments() -> None:
    environ: dict[str, str] = {}
    allocator_defaults("cuda", environ)
    assert environ == {"PYTORCH_CUDA_ALLOC_CONF": CUDA_ALLOC_CONF}


@pytest.mark.parametrize(
    "users", [{"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}, {"PYTORCH_ALLOC_CONF": ""}]
)
def test_the_users_allocator_setting_stays(users: dict[str, str]) -> None:
    environ = dict(users)
    allocator_defaults("cuda", environ)
    assert environ == users


@pytest.mark.parametrize("torch_type", ["cpu", "npu"])
def test_other_devices_get_no_cuda_allocator_setting(torch_type: str) -> None:
    environ: dict[str, str] = {}
    allocator_defaults(torch_type, environ)
    assert environ == {}


def test_the_process_group_takes_the_configured_timeout_and_a_cuda_device() -> None:
    config = compose(["trainer.comm_timeout_s=90"])
    cuda = group_options(config, torch.device("cuda", 3))
    assert cuda == {"timeout": timedelta(seconds=90), "device_id": torch.device("cuda", 3)}
    cpu = group_options(config, torch.device("cpu"))
    assert cpu == {"timeout": timedelta(seconds=90)}
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, **cpu)
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        assert backend.options._timeout == timedelta(seconds=90)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("key", ["comm_timeout_s", "gc_every"])
def test_a_timeout_or_collection_interval_below_one_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=f"trainer.{key}=0: must be at least 1"):
        compose([f"trainer.{key}=0"])
