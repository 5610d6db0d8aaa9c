"""Credit notes and the invoice lifecycle on the tenant API and the web page (issue 24, item 5),
on a real embedded ClickHouse: tests/unit/test_api_http.py's world, corrected there
(`seed_corrections`). Its figures, by hand (VAT 6 %, the ¥10.00 trial credit on each invoice):

    t02 GB-2026-000002  rent 3,600.00 − 10.00 = net 3,590.00; VAT 215.40; total 3,805.40
        CN-2026-000001  goodwill, 2026-04-15T00:00Z: ¥5.00 of the rent line; VAT 5.00 × 0.06 = 0.30;
                        total 5.30
    t03 GB-2026-000003  rent 1,800.00 − 10.00 = net 1,790.00; VAT 107.40; total 1,897.40 — voided
        CN-2026-000002  void, 2026-04-16T00:00Z: the rent 1,800.00 and the credit back (−10.00) =
                        1,790.00; VAT 1,790.00 × 0.06 = 107.40; total 1,897.40 (all of it)
        GB-2026-000004  the replacement, 2026-04-17T00:00Z: the same lines (the trial credit is free
                        again), total 1,897.40, due 15 days after its issue date: 2026-05-02
    t01 GB-2026-000001  as issued; no credit note

The credit notes are issued at midnight UTC, 08:00 in the billing zone (Asia/Shanghai): their
issue date is the same day.
"""

from __future__ import annotations

from decimal import Decimal

import re
import time
from datetime import UTC, datetime

import orjson
import pytest

from tenant_api.access_log import access_log
from tenant_api.keys import create_key
from tests.unit.test_api_http import (  # noqa: F401  (client, world: the fixtures)
    INVOICE_FORMATS, RULES, _page_session, bearer, client, make_client, world)

GOODWILL = {"number": "CN-2026-000001", "invoice": "GB-2026-000002", "period": "2026-03", "reason": "goodwill",
            "issued_at": "2026-04-15T00:00:00Z", "issue_date": "2026-04-15", "currency": "CNY",
            "subtotal": "5.00", "tax": "0.30", "total": "5.30"}
VOID = {"number": "CN-2026-000002", "invoice": "GB-2026-000003", "period": "2026-03", "reason": "void",
        "issued_at": "2026-04-16T00:00:00Z", "issue_date": "2026-04-16", "currency": "CNY",
        "subtotal": "1790.00", "tax": "107.40", "total": "1897.40"}
MEDIA = {"json": "application/json", "csv": "text/csv; charset=utf-8", "pdf": "application/pdf"}


def test_each_tenant_lists_its_own_credit_notes(client, world):
    _, seeded = world
    assert seeded["credit_notes"] == {"t01": [], "t02": ["CN-2026-000001"], "t03": ["CN-2026-000002"]}
    for tenant, expected in (("t01", []), ("t02", [GOODWILL]), ("t03", [VOID])):
        answer = client.get("/v1/credit-notes", headers=bearer(seeded["tokens"][tenant]))
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
        assert answer.json() == {"credit_notes": expected}, tenant


def test_each_invoice_says_its_status_what_replaced_it_and_its_credit_notes(client, world):
    _, seeded = world
    replacement, voided = client.get("/v1/invoices", headers=bearer(seeded["tokens"]["t03"])).json()["invoices"]
    assert (replacement["number"], replacement["status"], replacement["replaces"], replacement["replaced_by"]) == (
        "GB-2026-000004", "issued", "GB-2026-000003", "")
    assert (replacement["total"], replacement["credit_used"], replacement["credit_notes"]) == ("1897.40", "10.00", [])
    assert (replacement["issue_date"], replacement["amount_due"], replacement["due_date"], replacement["settled"]) == (
        "2026-04-17", "1897.40", "2026-05-02", False)  # 2026-04-17 + 15 days
    assert (voided["number"], voided["status"], voided["replaces"], voided["replaced_by"]) == (
        "GB-2026-000003", "voided", "", "GB-2026-000004")
    assert voided["total"] == "1897.40" and voided["credit_notes"] == ["CN-2026-000002"]
    assert (voided["amount_due"], voided["due_date"], voided["settled"]) == ("0.00", None, True)  # nothing asked
    (credited,) = client.get("/v1/invoices", headers=bearer(seeded["tokens"]["t02"])).json()["invoices"]
    assert (credited["status"], credited["credit_notes"], credited["replaced_by"]) == ("issued", ["CN-2026-000001"], "")
    # what is left to pay: the total less the credit note's 5.30 (postpaid: the whole total was asked)
    assert Decimal(credited["amount_due"]) == Decimal(credited["total"]) - Decimal("5.30") and not credited["settled"]
    (plain,) = client.get("/v1/invoices", headers=bearer(seeded["tokens"]["t01"])).json()["invoices"]
    assert (plain["status"], plain["credit_notes"], plain["replaces"], plain["replaced_by"]) == ("issued", [], "", "")


def test_a_voided_invoice_downloads_as_itself_not_its_replacement(client, world):
    # before: the download was built by (tenant, period), which now stands for the replacement
    from reports.invoice_document import invoice_document
    from reports.render import render_invoice

    db, seeded = world
    auth = bearer(seeded["tokens"]["t03"])
    for number, status in (("GB-2026-000003", "voided"), ("GB-2026-000004", "issued")):
        answer = client.get(f"/v1/invoices/{number}?format=json", headers=auth)
        assert answer.status_code == 200, answer.text
        body = orjson.loads(answer.content)
        assert (body["number"], body["status"], body["tenant"]) == (number, status, "t03")
        assert body == orjson.loads(render_invoice(invoice_document(db, RULES, "t03", number=number), "json"))
        for fmt in ("csv", "pdf"):
            got = client.get(f"/v1/invoices/{number}?format={fmt}", headers=auth)
            assert got.status_code == 200 and got.headers["content-type"] == MEDIA[fmt]
            assert got.headers["content-disposition"] == f'attachment; filename="{number}_t03_2026-03.{fmt}"'
    assert client.get("/v1/invoices/GB-2026-000003?format=pdf", headers=auth).content != client.get(
        "/v1/invoices/GB-2026-000004?format=pdf", headers=auth).content


@pytest.mark.parametrize("tenant, note", [("t02", GOODWILL), ("t03", VOID)])
def test_a_credit_note_downloads_as_its_document_in_every_format(client, world, tenant, note):
    from reports.credit_note_document import credit_note_document
    from reports.render import render_credit_note

    db, seeded = world
    auth = bearer(seeded["tokens"][tenant])
    number = note["number"]
    document = credit_note_document(db, RULES, number, tenant=tenant)
    for fmt in INVOICE_FORMATS:
        answer = client.get(f"/v1/credit-notes/{number}?format={fmt}", headers=auth)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == MEDIA[fmt]
        assert answer.headers["content-disposition"] == f'attachment; filename="{number}_{tenant}_2026-03.{fmt}"'
        assert answer.headers["cache-control"] == "no-store" and answer.headers["x-content-type-options"] == "nosniff"
        assert answer.content == render_credit_note(document, fmt, lang="en")
    body = client.get(f"/v1/credit-notes/{number}", headers=auth).json()  # json by default
    assert {k: body[k] for k in ("number", "invoice", "period", "reason", "subtotal", "tax", "total")} == {
        k: note[k] for k in ("number", "invoice", "period", "reason", "subtotal", "tax", "total")}
    assert body["tenant"] == tenant
    chinese = client.get(f"/v1/credit-notes/{number}?format=pdf&lang=zh-CN", headers=auth)
    assert chinese.status_code == 200 and chinese.content.startswith(b"%PDF-")
    assert chinese.content != client.get(f"/v1/credit-notes/{number}?format=pdf", headers=auth).content


def test_the_void_credit_note_lines_are_the_invoice_s_by_hand(client, world):
    _, seeded = world
    body = client.get("/v1/credit-notes/CN-2026-000002", headers=bearer(seeded["tokens"]["t03"])).json()
    # the rent 1,800.00 credited, the trial credit's −10.00 given back: 1,790.00 before VAT
    assert [(line["invoice_line_no"], line["kind"], line["amount"]) for line in body["lines"]] == [
        (1, "rent", "1800.00"), (2, "credit", "-10.00")]
    assert body["note"] == "wrong customer"


@pytest.mark.parametrize("number", ["CN-2026-000001%0D%0AX-Evil:%201", "%00",
                                    "CN-2026-" + "1" * 5000, "CN-2026-00000１", "CN-2026-000001.pdf",
                                    "cn-2026-000001", "CN-2026-000001%20", "GB-2026-000002", "CN-2026-999999",
                                    "CN-26-000001"])
def test_malformed_unknown_and_other_numbers_are_the_same_404(client, world, number):
    _, seeded = world
    missing = client.get("/v1/credit-notes/CN-2026-999999?format=pdf", headers=bearer(seeded["tokens"]["t02"]))
    answer = client.get(f"/v1/credit-notes/{number}?format=pdf", headers=bearer(seeded["tokens"]["t02"]))
    assert (answer.status_code, answer.content) == (404, missing.content)
    assert answer.headers["content-type"] == "application/problem+json"
    assert "x-evil" not in answer.headers and "content-disposition" not in answer.headers
    assert answer.json()["detail"] == "no such credit note: see GET /v1/credit-notes for your credit notes' numbers"


def test_a_path_out_of_the_route_is_no_route(client, world):
    _, seeded = world
    answer = client.get("/v1/credit-notes/..%2F..%2Fetc%2Fpasswd?format=pdf", headers=bearer(seeded["tokens"]["t02"]))
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/problem+json"
    assert "content-disposition" not in answer.headers


@pytest.mark.parametrize(("query", "param"), [
    ("format=exe", "format"), ("format=PDF", "format"), ("format=parquet", "format"), ("lang=fr", "lang"),
    ("formt=pdf", "formt"), ("format=pdf&format=csv", "format"), ("tenant=t02", "tenant"),
])
def test_bad_parameters_of_a_credit_note_are_400_naming_them(client, world, query, param):
    _, seeded = world
    answer = client.get(f"/v1/credit-notes/CN-2026-000001?{query}", headers=bearer(seeded["tokens"]["t02"]))
    assert answer.status_code == 400 and answer.json()["param"] == param, answer.text


def test_an_operator_names_the_tenant_of_a_credit_note(client, world):
    _, seeded = world
    operator = bearer(seeded["tokens"]["operator"])
    assert client.get("/v1/credit-notes/CN-2026-000001?format=json&tenant=t02", headers=operator).json()[
        "tenant"] == "t02"
    assert client.get("/v1/credit-notes/CN-2026-000001?tenant=t03", headers=operator).status_code == 404
    assert client.get("/v1/credit-notes/CN-2026-000001", headers=operator).json()["param"] == "tenant"
    assert client.get("/v1/credit-notes?tenant=t02", headers=operator).json() == {"credit_notes": [GOODWILL]}


def test_credit_note_downloads_are_capped_recorded_and_built_once(world, monkeypatch):
    import reports.render.credit_note as renderer

    db, _ = world
    built = []
    render = renderer.render_credit_note
    monkeypatch.setattr(renderer, "render_credit_note", lambda *a, **k: built.append(a[1]) or render(*a, **k))
    started = datetime.now(UTC).replace(microsecond=0)
    key, token = create_key(db, tenant="t02", label="this test's")  # other tests' records are other keys'
    auth = bearer(token)
    with make_client(db, api_downloads_per_key=1) as http:
        with http.app.state.service.downloads.acquire(key.id):  # one in flight already
            capped = http.get("/v1/credit-notes/CN-2026-000001?format=pdf", headers=auth)
            assert capped.status_code == 429 and capped.headers["retry-after"] == "1"
        first = http.get("/v1/credit-notes/CN-2026-000001?format=pdf", headers=auth)
        again = http.get("/v1/credit-notes/CN-2026-000001?format=pdf", headers=auth)
        assert first.status_code == again.status_code == 200 and first.content == again.content
        assert built == ["pdf"]  # the second came from the cache (tenant_api/cache.py)
        refused = http.get("/v1/credit-notes/CN-2026-000002?format=csv", headers=auth)  # t03's
        assert refused.status_code == 404
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            records = access_log(db, key_id=key.id, since=started)
            if len(records) >= 4:
                break
            time.sleep(0.1)
    rows = sorted((r.status, r.what, r.period, r.fmt, r.bytes, r.reason, r.tenant) for r in records)
    assert rows == sorted([
        (429, "/v1/credit-notes/CN-2026-000001", "", "pdf", 0, "downloads-capped", "t02"),
        (200, "/v1/credit-notes/CN-2026-000001", "2026-03", "pdf", len(first.content), "", "t02"),
        (200, "/v1/credit-notes/CN-2026-000001", "2026-03", "pdf", len(first.content), "", "t02"),
        (404, "/v1/credit-notes/CN-2026-000002", "", "csv", 0, "not-found", "t02"),
    ]), rows


def row_text(page: str, attribute: str, number: str) -> str:
    found = re.search(rf'<tr data-{attribute}="{re.escape(number)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, (attribute, number)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(1))).strip()


@pytest.mark.parametrize("lang, words", [
    ("en", ("Voided", "replaced by GB-2026-000004", "replaces GB-2026-000003", "Credit notes", "Invoice voided",
            "credit notes: CN-2026-000002")),
    ("zh-CN", ("已作废", "已由 GB-2026-000004 替代", "替代 GB-2026-000003", "贷项通知单", "账单作废",
               "贷项通知单：CN-2026-000002")),
])
def test_the_page_shows_the_voided_invoice_its_replacement_and_the_credit_note(client, world, lang, words):
    from reports.credit_note_document import credit_note_document
    from reports.render import render_credit_note

    db, seeded = world
    voided_word, replaced_by, replaces, title, reason, notes = words
    browser = _page_session(client, seeded["tokens"]["t03"])
    page = browser.get(f"/?lang={lang}").text
    voided = row_text(page, "invoice", "GB-2026-000003")
    assert voided_word in voided and replaced_by in voided and notes in voided and "¥1,897.40" in voided
    replacement = row_text(page, "invoice", "GB-2026-000004")
    assert replaces in replacement and voided_word not in replacement
    assert title in page and reason in row_text(page, "credit-note", "CN-2026-000002")
    assert "¥1,897.40" in row_text(page, "credit-note", "CN-2026-000002")
    got = browser.get("/files/credit-notes/CN-2026-000002?format=csv")  # the page's language: the cookie
    assert got.status_code == 200
    assert got.content == render_credit_note(credit_note_document(db, RULES, "CN-2026-000002", tenant="t03"), "csv",
                                             lang=lang)
    pdf = browser.get("/files/credit-notes/CN-2026-000002?format=pdf")
    assert pdf.content.startswith(b"%PDF-") and pdf.headers["content-disposition"] == (
        f'attachment; filename="CN-2026-000002_t03_2026-03{"" if lang == "en" else "." + lang}.pdf"')  # issue 36
    old = orjson.loads(browser.get("/files/invoices/GB-2026-000003?format=json").content)
    assert (old["number"], old["status"]) == ("GB-2026-000003", "voided")
