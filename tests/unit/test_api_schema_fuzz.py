"""The tenant API as a third-party fuzzer sees it (issue 36, item 8): schemathesis generates
requests from the OpenAPI documents the app serves and checks every answer against them.

Two documents, one per kind of key: `/openapi.json` (tenant keys: no `tenant` parameter, a key
reads its own tenant) and `/openapi-operator.json` (operator keys: `tenant` required). Each is
run with its key on the in-process app over a real embedded ClickHouse holding the world of
tests/unit/test_api_http.py (three tenants, March 2026 invoiced, a credit note, a void); random
months rarely reach that data, so `test_real_documents_conform` also sends the seeded ones.

All of schemathesis's checks run: no 5xx, status codes, content types, headers and bodies as
declared, schema-valid requests accepted (no 400: ST202), schema-violating ones refused, a
request without the key refused. Bounded and deterministic: a fixed number of examples per
operation, derandomized, no deadline per example (a first Chinese PDF parses its font).

Two refusals are not the schema's to say (OpenAPI cannot tie two parameters together):
`granularity=hour` with `format=pdf`, and a statement whose `from` is after its `to` (or after
today, `to` left out); the parameters' descriptions say them, and those cases are left out of
generation here (`_without_cross_refusals`).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings

from tests.unit.test_api_http import make_client, seeded_database

EXAMPLES = 6  # per operation and document: 10 operations × 2 documents × (explicit + generated) in ~40 s here
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))


OPERATIONS = ("GET /v1/me", "GET /v1/usage", "GET /v1/usage/current", "GET /v1/balance", "GET /v1/invoices",
              "GET /v1/invoices/{number}", "GET /v1/credit-notes", "GET /v1/credit-notes/{number}", "GET /v1/payments",
              "GET /v1/statement")
DOCUMENTS = {"tenant": "/openapi.json", "operator": "/openapi-operator.json"}  # key kind → its document


@pytest.fixture(scope="module")
def fuzz_world(tmp_path_factory):
    with seeded_database(tmp_path_factory.mktemp("fuzz")) as (db, seeded):
        with make_client(db) as client:  # the lifespan runs: access records are written
            yield client, seeded


@pytest.fixture(scope="module")
def schemas(fuzz_world) -> Any:
    """The document of a kind of key, loaded once."""
    client, _ = fuzz_world
    loaded: dict[str, Any] = {}

    def of(kind: str) -> Any:
        if kind not in loaded:
            loaded[kind] = schemathesis.openapi.from_asgi(DOCUMENTS[kind], client.app)
        return loaded[kind]
    return of


def _without_cross_refusals(case: Any) -> bool:
    """False for the documented cross-parameter refusals: hourly rows as a PDF; a statement's range that
    runs backwards (`from` after `to`, or after today — UTC's or the billing zone's — when `to` is left out)."""
    query = case.query if isinstance(case.query, dict) else {}
    if query.get("granularity") == "hour" and query.get("format") == "pdf":
        return False
    start, end = query.get("from"), query.get("to")
    if isinstance(start, str) and start[:1].isdigit():
        try:
            start_on = date.fromisoformat(start)
            end_on = date.fromisoformat(end) if isinstance(end, str) else datetime.now(UTC).date()
        except ValueError:
            return True  # not a day: the schema says no (negative mode), the API says 400
        return start_on <= end_on
    return True


def test_the_documents_cover_every_route(schemas):
    for kind in DOCUMENTS:
        schema = schemas(kind)
        served = {f"{method.upper()} {path}" for path, methods in schema.raw_schema["paths"].items()
                  if path.startswith("/v1/") for method in methods}
        assert served == set(OPERATIONS), kind


@pytest.mark.parametrize("kind", DOCUMENTS)
@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_the_fuzzer_finds_no_violation(schemas, fuzz_world, kind, operation, mode):
    from schemathesis import GenerationMode

    _, seeded = fuzz_world
    method, path = operation.split(" ")
    api = schemas(kind)[path][method]
    auth = {"Authorization": f"Bearer {seeded['tokens']['operator' if kind == 'operator' else 't02']}"}
    strategy = api.as_strategy(generation_mode=GenerationMode(mode)).filter(_without_cross_refusals)

    @FUZZ
    @given(case=strategy)
    def fuzz(case: Any) -> None:
        case.call_and_validate(headers=auth)

    fuzz()


@pytest.mark.parametrize("kind", DOCUMENTS)
def test_real_documents_conform(schemas, fuzz_world, kind):
    """What random months rarely reach: t02's March report, invoice and credit note in every
    format and language, each answered 200 and checked against the document."""
    _, seeded = fuzz_world
    schema = schemas(kind)
    auth = {"Authorization": f"Bearer {seeded['tokens']['operator' if kind == 'operator' else 't02']}"}
    named = {"tenant": "t02"} if kind == "operator" else {}
    invoice = seeded["numbers"]["t02"]
    (note,) = seeded["credit_notes"]["t02"]  # the goodwill note on its invoice
    cases = [("/v1/me", {}, {}), ("/v1/usage/current", {}, named), ("/v1/balance", {}, named),
             ("/v1/invoices", {}, named), ("/v1/credit-notes", {}, named), ("/v1/payments", {}, named),
             ("/v1/statement", {}, named), ("/v1/statement", {}, {"from": "2026-04-01", "to": "2026-04-30", **named}),
             ("/v1/usage", {}, {"period": "2026-03", "granularity": "hour", "format": "json", **named})]
    for lang in ("en", "zh-CN"):
        cases += [("/v1/usage", {}, {"period": "2026-03", "format": fmt, "lang": lang, **named})
                  for fmt in ("csv", "json", "parquet", "pdf")]
        cases += [("/v1/invoices/{number}", {"number": invoice}, {"format": fmt, "lang": lang, **named})
                  for fmt in ("json", "csv", "pdf")]
        cases += [("/v1/credit-notes/{number}", {"number": note}, {"format": fmt, "lang": lang, **named})
                  for fmt in ("json", "csv", "pdf")]
    for path, path_parameters, query in cases:
        if path == "/v1/me":
            query = {}
        case = schema[path]["GET"].Case(path_parameters=path_parameters, query=query)
        answer = case.call_and_validate(headers=auth)
        assert answer.status_code == 200, (path, query, answer.text)
