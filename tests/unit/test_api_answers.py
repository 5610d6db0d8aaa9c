"""Every JSON answer of the tenant API against the schema /openapi.json publishes for it (issue 23,
item 5), and one number format: money two decimals ("0.00", never "0"), quantities six.

The world is tests/unit/test_api_http.py's (t01 … with rated usage and an invoice for March 2026,
t02's with a credit note on it, t03's voided and replaced); its current period has no usage, so
the month to date is all zeros — the case that was "0".
"""

from __future__ import annotations

import typing

import pytest

from tenant_api.answers import ANSWERS, CreditNoteSummary, InvoiceSummary
from tests.unit.test_api_http import SECONDS, bearer, client, world  # noqa: F401  (the fixtures)


@pytest.mark.parametrize("path", sorted(ANSWERS))
def test_every_answer_is_what_openapi_says(client, world, path):  # noqa: F811
    _, seeded = world
    schema = client.get("/openapi.json").json()
    model = ANSWERS[path]
    ok = schema["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": f"#/components/schemas/{model.__name__}"}
    assert model.__name__ in schema["components"]["schemas"]
    for tenant in SECONDS:  # t01 as issued, t02 with a credit note, t03 voided and replaced
        answer = client.get(path, headers=bearer(seeded["tokens"][tenant]))
        assert answer.status_code == 200, answer.text
        model.model_validate(answer.json())  # extra keys, a "0" for money, a missing field: refused


def test_the_invoice_and_credit_note_answers_hold_every_state(client, world):  # noqa: F811
    # the models are held against answers that use them: a voided invoice, its replacement, a credit note
    _, seeded = world
    invoices = client.get("/v1/invoices", headers=bearer(seeded["tokens"]["t03"])).json()["invoices"]
    assert [(i["status"], i["replaces"], i["replaced_by"]) for i in invoices] == [
        ("issued", seeded["numbers"]["t03"], ""), ("voided", "", seeded["replacements"]["t03"])]
    notes = client.get("/v1/credit-notes", headers=bearer(seeded["tokens"]["t02"])).json()["credit_notes"]
    assert [n["reason"] for n in notes] == ["goodwill"]
    assert client.get("/v1/credit-notes", headers=bearer(seeded["tokens"]["t01"])).json() == {"credit_notes": []}


def test_the_published_reasons_and_statuses_are_the_billing_s():
    from billing.credit_notes import REASONS

    assert typing.get_args(CreditNoteSummary.model_fields["reason"].annotation) == REASONS
    assert typing.get_args(InvoiceSummary.model_fields["status"].annotation) == ("issued", "voided")  # never a draft


def test_money_is_two_decimals_even_when_it_is_nothing(client, world):  # noqa: F811
    # before: /v1/usage/current sent "rent": "0" beside "vat": "0.00"
    _, seeded = world
    current = client.get("/v1/usage/current", headers=bearer(seeded["tokens"]["t01"])).json()
    assert current["period"] != "2026-03"  # the current period: nothing rated yet
    assert (current["rent"], current["electricity"], current["credits"], current["vat"]) == ("0.00",) * 4
    assert (current["gpu_hours"], current["kwh"]) == ("0.000000", "0.000000")
    balance = client.get("/v1/balance", headers=bearer(seeded["tokens"]["t01"])).json()
    assert balance["top_ups"] == "0.00" and balance["estimated"] == "0.00"
    voided = client.get("/v1/invoices", headers=bearer(seeded["tokens"]["t03"])).json()["invoices"][1]
    assert (voided["amount_due"], voided["due_date"], voided["settled"]) == ("0.00", None, True)


def test_the_customer_s_401_names_no_operator_command(client):  # noqa: F811
    # before: "create a key with `gpubill key create --tenant T`" — a command only the operator can run
    for headers in ({}, bearer("gpb_nosuch_secret"), bearer("not a key")):
        answer = client.get("/v1/me", headers=headers)
        assert answer.status_code == 401
        assert "`gpubill" not in answer.json()["detail"], answer.json()  # no command to run
