"""Property-based fuzzing of the console's JSON API from the OpenAPI document it serves
(schemathesis), against the running console on loopback, as the pool API is fuzzed
(tests/pool/test_fuzz.py): no answer is a 500 and none is outside its documented schema
(status, content type, body), with a project's token, the operator's, a wrong one and none.

Examples per operation are bounded by ``XIRANG_FUZZ_EXAMPLES`` (default 12)."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.cost.pools import OPERATOR_TOKEN
from tests.pool.test_fuzz import CHECKS, EXAMPLES


def test_the_consoles_openapi_document_holds_under_fuzzing(console) -> None:
    schema = schemathesis.openapi.from_url(console.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = sorted(op.path for op in operations)
    assert paths == ["/api/cost", "/api/jobs", "/api/nodes", "/api/overview", "/metrics"]
    tokens = [OPERATOR_TOKEN, console.pool.tokens["nlp"], "not-a-token", ""]
    for operation in operations:
        _fuzz(operation, tokens)


def _fuzz(operation, tokens: list[str]) -> None:
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
