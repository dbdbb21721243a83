"""Property-based fuzzing of the pool API from the OpenAPI document the service serves
(schemathesis), against the running service on loopback, on each store: no answer is a 500, no
answer is outside its documented schema (status, content type, body), with a project's token
and the operator's. Then memory equals the store: a restart from the store serves the same jobs
and quotas the fuzzed service held live.

The examples per operation are bounded (``XIRANG_FUZZ_EXAMPLES``, default 12) so a store's run
stays well under 20 s."""

from __future__ import annotations

import os
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.pool.web import served
from xirang_service.pool.service import OPERATOR, PoolService
from xirang_service.pool.store import PoolStore

EXAMPLES = int(os.environ.get("XIRANG_FUZZ_EXAMPLES", "12"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_the_served_openapi_document_holds_under_fuzzing(
    store_location: str, cluster_file: Path
) -> None:
    with served(store_location, cluster_file) as pool:
        schema = schemathesis.openapi.from_url(pool.url + "/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) == 17  # every route of rest.py
        for operation in operations:
            fuzz(operation, list(pool.tokens.values()))
        held = _views(pool.service)
    again = PoolService(PoolStore(store_location), None, "priority", "op")
    try:
        assert _views(again) == held
    finally:
        again.store.close()


def fuzz(operation, tokens: list[str]) -> None:
    """Schemathesis cases of ``operation``, each sent with one of ``tokens`` ("" sends none),
    every answer checked against the served schema and for a 5xx."""

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(), token=st.sampled_from(tokens))
    def run(case, token: str) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        case.call_and_validate(headers=headers, checks=CHECKS)

    run()


def _views(service: PoolService) -> tuple[dict, dict]:
    """The live jobs (a restart loads only queued and running ones) and the quotas."""
    jobs = {j["id"]: j for j in service.jobs(OPERATOR) if j["state"] in ("queued", "running")}
    return jobs, {q["project"]: q for q in service.quotas(OPERATOR)}
