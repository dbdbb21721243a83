"""comm=mixed on 4 spawned gloo ranks labelled as two device types (their resolved
``runtime.device_type``): groups by type, the leaders' host-staged exchange, and gradients equal
to the plain all-reduce's, with even and unequal token shares."""

from __future__ import annotations

import pytest
import torch
from comm_workers import mixed_against_plain, mixed_refusals

from xirang import ConfigError
from xirang.comm import run_group
from xirang_core.plugins import get_registry

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

#: NVIDIA and AMD ranks interleaved, as a placement may deal them
TYPES = ["cuda", "rocm", "cuda", "rocm"]
STEPS = 3
#: micro-batches per rank: even, and unequal (a balanced run's shares, M = 8 either way)
SHARES = {"even": [2, 2, 2, 2], "unequal": [1, 3, 2, 2]}


@pytest.fixture(scope="module", params=sorted(SHARES))
def integer_run(request: pytest.FixtureRequest) -> list[dict]:
    """Integer gradients (exact in fp32) under comm=mixed and comm=gloo, every rank's result."""
    return run_group(mixed_against_plain, 4, TYPES, SHARES[request.param], STEPS, True)


def test_mixed_equals_plain_allreduce_and_the_token_mean(integer_run: list[dict]) -> None:
    for rank in integer_run:
        pairs = zip(rank["mixed"]["applied"], rank["gloo"]["applied"], rank["exact"], strict=True)
        for mixed, plain, exact in pairs:
            assert torch.equal(mixed, plain)
            assert torch.equal(mixed, exact)


def test_groups_are_by_device_type_with_their_leaders(integer_run: list[dict]) -> None:
    report = integer_run[0]["mixed"]["report"]
    assert report["groups"] == [[0, 2], [1, 3]]
    assert report["leaders"] == [0, 1]
    assert report["types"] == {
        "cuda": {"ranks": [0, 2], "leader": 0, "backend": "gloo"},
        "rocm": {"ranks": [1, 3], "leader": 1, "backend": "gloo"},
    }
    assert report["inter_backend"] == "gloo"


def test_ledger_counts_intra_and_inter_type_bytes(integer_run: list[dict]) -> None:
    grad_bytes = STEPS * integer_run[0]["exact"][0].numel() * 4
    for rank, result in enumerate(integer_run):
        ops = result["mixed"]["report"]["collectives"]
        assert ops["reduce@intra-type"]["payload_bytes"] == grad_bytes
        assert ops["broadcast@intra-type"]["payload_bytes"] == grad_bytes
        if rank in (0, 1):  # the leaders carry the exchange across types
            assert ops["all_reduce@inter-type"]["payload_bytes"] == grad_bytes
            assert ops["all_reduce@inter-type"]["wire_bytes"] == grad_bytes  # ring of 2: 2(p-1)/p
        else:
            assert "all_reduce@inter-type" not in ops


def test_real_gradients_match_the_token_mean_to_rounding() -> None:
    results = run_group(mixed_against_plain, 4, TYPES, SHARES["unequal"], 2, False)
    for rank in results:
        pairs = zip(rank["mixed"]["applied"], rank["gloo"]["applied"], rank["exact"], strict=True)
        for mixed, plain, exact in pairs:
            torch.testing.assert_close(mixed, plain, rtol=1e-6, atol=1e-7)
            torch.testing.assert_close(mixed, exact, rtol=1e-6, atol=1e-7)


def test_bad_input_stops_every_rank_with_one_error() -> None:
    said = run_group(mixed_refusals, 2, ["cpu", "abacus"])
    assert said[0] == said[1]  # no rank goes on to wait for the others in a collective
    unknown, sub_group = said[0]
    assert "no collective backend is known for device type 'abacus'" in unknown
    assert "comm=mixed builds its groups over all workers" in sub_group


def test_the_world_group_is_gloo_and_refuses_types_gloo_cannot_carry() -> None:
    option = get_registry().create("comm", {"name": "mixed"})
    assert [option.backend_for(t) for t in ("cpu",)] == ["gloo"]
    assert [option.type_backend(t) for t in ("cpu", "cuda", "rocm", "ascend")] == [
        "gloo",
        "nccl",
        "nccl",
        "hccl",
    ]
    with pytest.raises(ConfigError, match="ascend tensors cannot travel through gloo"):
        option.backend_for("ascend")
