"""Property-based fuzzing of the console's JSON API from the OpenAPI document it serves
(schemathesis), against the running console on loopback, as the pool API is fuzzed
(tests/pool/test_fuzz.py): no answer is a 500 and none is outside its documented schema
(status, content type, body), with a project's token, the operator's, a wrong one and none.

Examples per operation are bounded by ``XIRANG_FUZZ_EXAMPLES`` (default 12)."""

from __future__ import annotations

import schemathesis

from tests.cost.pools import OPERATOR_TOKEN
from tests.pool.test_fuzz import fuzz


def test_the_consoles_openapi_document_holds_under_fuzzing(console) -> None:
    schema = schemathesis.openapi.from_url(console.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = sorted(op.path for op in operations)
    assert paths == ["/api/cost", "/api/jobs", "/api/nodes", "/api/overview", "/metrics"]
    tokens = [OPERATOR_TOKEN, console.pool.tokens["nlp"], "not-a-token", ""]
    for operation in operations:
        fuzz(operation, tokens)
