"""Every JSON answer of the tenant API against the schema /openapi.json publishes for it (issue 23,
item 5), and one number format: money two decimals ("0.00", never "0"), quantities six.

The world is tests/unit/test_api_http.py's (t01 … with rated usage and an invoice for March 2026);
its current period has no usage, so the month to date is all zeros — the case that was "0".
"""

from __future__ import annotations

import pytest

from tenant_api.answers import ANSWERS
from tests.unit.test_api_http import bearer, client, world  # noqa: F401  (the fixtures)


@pytest.mark.parametrize("path", sorted(ANSWERS))
def test_every_answer_is_what_openapi_says(client, world, path):  # noqa: F811
    _, seeded = world
    answer = client.get(path, headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 200, answer.text
    model = ANSWERS[path]
    model.model_validate(answer.json())  # extra keys, a "0" for money, a missing field: refused
    schema = client.get("/openapi.json").json()
    ok = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": f"#/components/schemas/{model.__name__}"}
    assert model.__name__ in schema["components"]["schemas"]


def test_money_is_two_decimals_even_when_it_is_nothing(client, world):  # noqa: F811
    # before: /v1/usage/current sent "rent": "0" beside "vat": "0.00"
    _, seeded = world
    current = client.get("/v1/usage/current", headers=bearer(seeded["tokens"]["t01"])).json()
    assert current["period"] != "2026-03"  # the current period: nothing rated yet
    assert (current["rent"], current["electricity"], current["credits"], current["vat"]) == ("0.00",) * 4
    assert (current["gpu_hours"], current["kwh"]) == ("0.000000", "0.000000")
    balance = client.get("/v1/balance", headers=bearer(seeded["tokens"]["t01"])).json()
    assert balance["top_ups"] == "0.00" and balance["estimated"] == "0.00"


def test_the_customer_s_401_names_no_operator_command(client):  # noqa: F811
    # before: "create a key with `gpubill key create --tenant T`" — a command only the operator can run
    for headers in ({}, bearer("gpb_nosuch_secret"), bearer("not a key")):
        answer = client.get("/v1/me", headers=headers)
        assert answer.status_code == 401
        assert "`gpubill" not in answer.json()["detail"], answer.json()  # no command to run
