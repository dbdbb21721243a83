"""MFU's peak does not grow with workers that only wait for cores (issue 20, item 8)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xirang_core.train.flops_peak import concurrent_workers, run_peak_flops


def test_four_one_thread_workers_on_two_cores_have_two_cores_of_peak() -> None:
    runtime = {
        "peak_flops_per_worker": 1e9,
        "concurrent_workers": concurrent_workers(4, 1, 2, True),
    }
    assert run_peak_flops(runtime, 4) == 2e9  # was 4e9: twice what the host can do
    assert run_peak_flops(runtime, 1) == 1e9  # one worker left after evictions


@given(
    nproc=st.integers(1, 64),
    threads=st.integers(1, 16),
    cores=st.integers(1, 128),
)
def test_shared_host_peak_never_exceeds_its_cores(nproc: int, threads: int, cores: int) -> None:
    workers = concurrent_workers(nproc, threads, cores, shareable=True)
    assert 1 <= workers <= nproc
    assert workers * threads <= max(cores, threads)  # never more threads than cores (but one)
    assert workers == nproc or (workers + 1) * threads > cores  # and no idle room left


def test_devices_of_their_own_add_up() -> None:
    assert concurrent_workers(8, 1, 2, shareable=False) == 8
