"""Origin requests: transient failures retried, throttling shared, missing objects not retried."""

from __future__ import annotations

import pytest

from xirang.storage.retry import RetryPolicy, Throttle, is_throttle, is_transient


class SlowDown(Exception):
    """What botocore raises when S3 throttles: the code is in ``response``."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.response = {"Error": {"Code": "SlowDown"}}


def test_transient_errors_are_retried_until_success() -> None:
    slept: list[float] = []
    throttle = Throttle(RetryPolicy(base_delay_s=0.1), sleep=slept.append)
    failures = iter([ConnectionRefusedError("down"), TimeoutError("slow")])

    def call() -> str:
        err = next(failures, None)
        if err:
            raise err
        return "ok"

    assert throttle.call(call) == "ok"
    assert len(slept) == 2 and slept[1] > 0


def test_missing_objects_fail_at_once() -> None:
    throttle = Throttle(sleep=lambda s: None)
    calls = []

    def call() -> None:
        calls.append(1)
        raise FileNotFoundError("shards/x.arrow")

    with pytest.raises(FileNotFoundError):
        throttle.call(call)
    assert len(calls) == 1


def test_slowdown_pauses_every_caller() -> None:
    slept: list[float] = []
    throttle = Throttle(RetryPolicy(base_delay_s=1.0), sleep=slept.append)
    answers = iter([SlowDown("Please reduce your request rate")])

    def call() -> str:
        err = next(answers, None)
        if err:
            raise err
        return "ok"

    assert throttle.call(call) == "ok"
    assert throttle.pause_until > 0  # shared: the next request of any thread waits too
    throttle.call(lambda: "other")
    assert len(slept) >= 1


def test_classification() -> None:
    assert is_throttle(SlowDown()) and is_transient(SlowDown())
    assert is_transient(OSError("connection reset"))
    assert not is_transient(PermissionError("denied"))
    assert not is_transient(ValueError("bug"))


def test_request_rate_is_bounded() -> None:
    slept: list[float] = []
    throttle = Throttle(RetryPolicy(max_requests_per_s=1.0), sleep=slept.append)
    for _ in range(5):
        throttle.call(lambda: None)
    assert len(slept) >= 3  # later requests waited for their slot
