"""``xirang bench comm`` reports the bytes on the wire and the hidden communication that
xirang_comm's options count; a comm option of another plugin, which counts neither, is refused by
name rather than failing on a missing ledger inside a worker."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import pytest
from xirang_comm import scaling
from xirang_comm.base import GradientSync

from xirang import ConfigError, hookimpl
from xirang.specs import CommBackendSpec
from xirang.testing import registry_with


class Uncounted:
    """A comm option that installs DDP's default all-reduce and counts nothing."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings


def with_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed plugins plus one registering ``uncounted``, as the benchmark's registry."""
    plugin = ModuleType("uncounted_comm")

    @hookimpl
    def xirang_comm_backends() -> list[CommBackendSpec]:
        return [
            CommBackendSpec(
                name="uncounted",
                target=f"{__name__}:Uncounted",
                schema="xirang_comm.base:CommSettings",
                description="counts nothing",
                device_types=("cpu",),
            )
        ]

    plugin.xirang_comm_backends = xirang_comm_backends  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, plugin.__name__, plugin)
    registry = registry_with(plugin)
    monkeypatch.setattr(scaling, "get_registry", lambda: registry)


def test_a_built_in_option_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    with_options(monkeypatch)
    option = scaling.counted_option(scaling.TrainSettings(option="fp16"))
    assert isinstance(option, GradientSync)
    assert option.ledger.wire_bytes() == 0.0  # nothing sent yet


def test_an_option_that_counts_nothing_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    with_options(monkeypatch)
    with pytest.raises(ConfigError, match=r"comm=uncounted does not count its bytes"):
        scaling.counted_option(scaling.TrainSettings(option="uncounted"))
