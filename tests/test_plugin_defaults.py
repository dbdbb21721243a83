"""Optional protocol members: a plugin that inherits none of ``xirang.specs``' base classes
(written before a member existed) still loads and trains, its own members kept and the rest
defaulted; the kernel calls every member without probing for it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import torch

from xirang.specs import RunConfig, StrategyBase, WorkerContext

PLUGIN = '''
from xirang import conf_folder, hookimpl
from xirang.specs import StrategySpec


class PlainStrategy:
    """Only ``wrap``, as CONTRIBUTING.md asks: no base class, no optional member."""

    def wrap(self, model, ctx):
        return model


class CompilingStrategy:
    """One optional member of its own: it compiles (and here: does not) the model itself."""

    compiles = True

    def wrap(self, model, ctx):
        return model


@hookimpl
def xirang_parallel_strategies():
    return [
        StrategySpec(name="plain", target="xirang_plainstrat:PlainStrategy", multi_process=False),
        StrategySpec(
            name="selfcompiled",
            target="xirang_plainstrat:CompilingStrategy",
            multi_process=False,
        ),
    ]


@hookimpl
def xirang_config_search_paths():
    return conf_folder(__file__)
'''


def _use_plugin(xirang: Any, tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "xirang_plainstrat.py").write_text(textwrap.dedent(PLUGIN))
    (source / "conf" / "parallel").mkdir(parents=True)
    (source / "conf" / "parallel" / "plain.yaml").write_text("name: plain\n")
    xirang.use("xirang_plainstrat", path=source)


def test_a_strategy_without_the_base_gets_the_defaults_and_keeps_its_own(xirang, tmp_path):
    _use_plugin(xirang, tmp_path)
    ctx = WorkerContext(0, 0, 1, torch.device("cpu"), str(tmp_path), RunConfig({}))
    plain = xirang.registry.create("parallel", {"name": "plain"})
    assert not isinstance(plain, StrategyBase)  # nothing inherited: filled in
    assert (plain.compiles, plain.splits_model, plain.optimizer, plain.trained) == (
        False,
        False,
        None,
        None,
    )
    assert plain.build_mesh(ctx) is None
    assert plain.shards_parameters(ctx) is False
    assert xirang.registry.create("parallel", {"name": "selfcompiled"}).compiles is True


def test_a_strategy_without_the_base_trains(xirang, tmp_path):
    _use_plugin(xirang, tmp_path)
    run = xirang.train("parallel=plain", "model=gpt_tiny")
    assert run.summary["steps"] == 4
    assert run.summary["final_loss"] > 0


DEVICE_PLUGIN = '''
from xirang import conf_folder, hookimpl
from xirang.specs import DeviceBackendSpec


class OldBackend:
    """Written before ``torch_type`` existed: no base class."""

    type = "old"


class XpuBackend(OldBackend):
    """Names torch's device type itself."""

    torch_type = "xpu"


@hookimpl
def xirang_device_backends():
    return [
        DeviceBackendSpec(name="old", target="xirang_olddevice:OldBackend"),
        DeviceBackendSpec(name="oldxpu", target="xirang_olddevice:XpuBackend"),
    ]


@hookimpl
def xirang_config_search_paths():
    return conf_folder(__file__)
'''


def test_a_device_backend_without_the_base_gets_torch_type_cpu_or_keeps_its_own(xirang, tmp_path):
    """The worker reads ``torch_type`` (which allocator settings apply) from every backend, so
    one written before the member existed is the host's to torch, as the CPU backend is."""
    source = tmp_path / "src"
    (source / "conf" / "device").mkdir(parents=True)
    (source / "xirang_olddevice.py").write_text(textwrap.dedent(DEVICE_PLUGIN))
    for name in ("old", "oldxpu"):
        (source / "conf" / "device" / f"{name}.yaml").write_text(f"name: {name}\n")
    xirang.use("xirang_olddevice", path=source)
    assert xirang.registry.create("device", {"name": "old"}).torch_type == "cpu"
    assert xirang.registry.create("device", {"name": "oldxpu"}).torch_type == "xpu"
    assert xirang.registry.create("device", {"name": "cpu"}).torch_type == "cpu"
