"""Payments on the tenant API and the page (issue 38): how each invoice is paid, the payments, the
statement of account, what is outstanding — each tenant its own, never another's — on a real
embedded ClickHouse holding tests/unit/test_api_http.py's world (its March invoices and
corrections), with payments recorded by billing.payments. The service's clock is fixed:
2026-06-15T04:00Z, 12:00 in the billing time zone (Asia/Shanghai), so today is 2026-06-15.

The invoices (test_api_http.py's docstring; VAT 6 %, the ¥10.00 trial credit; terms 15 days):
    t01 GB-2026-000001  issued 2026-04-10: rent 7,200.00 − 10.00 = 7,190.00; VAT 431.40; total 7,621.40;
                        due 2026-04-25
    t02 GB-2026-000002  issued 2026-04-10, total 3,805.40; CN-2026-000001 (04-15) credits 5.30
    t03 GB-2026-000003  issued 2026-04-10, total 1,897.40, voided 04-16 by CN-2026-000002 (1,897.40);
        GB-2026-000004  its replacement, issued 2026-04-17, total 1,897.40, due 2026-05-02

The payments (this module's `seed_payments`):
    t01 pay-t01-a  3,000.00 bank, received 2026-04-20     → GB-…01: 7,621.40 − 3,000.00 = 4,621.40 left,
                                                            due 04-25: 51 days past due on 06-15, overdue
        pay-t01-b    100.00 wechat, received 2026-04-21, reversed 2026-04-22 → counts for nothing
    t02 pay-t02-a  4,000.00 alipay, received 2026-04-28   → GB-…02 asks 3,805.40 − 5.30 = 3,800.10: paid;
                                                            4,000.00 − 3,800.10 = 199.90 held unapplied
    t03 pay-t03-a    897.40 bank, received 2026-05-10     → GB-…04: 1,897.40 − 897.40 = 1,000.00 left,
        written off on 2026-06-01                          → nothing outstanding, partially paid
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from billing.payments import record_payment, reverse_payment, write_off
from gpubill.config import Settings
from tenant_api.access_log import record_access
from tenant_api.app import create_app
from tenant_api.reads import Reads
from tenant_api.records import AccessRecorder
from tenant_api.service import Limits, Service
from tests.unit.test_api_http import NAMES, RULES, SECONDS, bearer, seeded_database

NOW = datetime(2026, 6, 15, 4, 0, tzinfo=UTC)  # 12:00 in Asia/Shanghai: today is 2026-06-15
PAYMENTS = {"t01": ["pay-t01-a", "pay-t01-b"], "t02": ["pay-t02-a"], "t03": ["pay-t03-a"]}


def at(day: str) -> datetime:
    """Noon of `day` in the billing time zone (04:00 UTC): a write's clock on that day."""
    return datetime.fromisoformat(f"{day}T04:00:00+00:00")


def seed_payments(db: Any, numbers: dict[str, str], replacement: str) -> None:
    """The module docstring's payments, reversal and write-off."""
    record_payment(db, RULES, "t01", "3000.00", "pay-t01-a", "2026-04-20", method="bank", actor="test",
                   now=at("2026-04-20"))
    record_payment(db, RULES, "t01", "100.00", "pay-t01-b", "2026-04-21", method="wechat", actor="test",
                   now=at("2026-04-21"))
    reverse_payment(db, RULES, "pay-t01-b", "bounced", actor="test", now=at("2026-04-22"))
    record_payment(db, RULES, "t02", "4000.00", "pay-t02-a", "2026-04-28", method="alipay", actor="test",
                   now=at("2026-04-28"))
    record_payment(db, RULES, "t03", "897.40", "pay-t03-a", "2026-05-10", method="bank", actor="test",
                   now=at("2026-05-10"))
    assert write_off(db, RULES, replacement, "uncollectible", actor="test", now=at("2026-06-01")) == Decimal("1000.00")


def make_client(db: Any, now: datetime = NOW) -> TestClient:
    """The app over `db` with the service's clock at `now` and limits out of the way."""
    reads = Reads([db])
    recorder = AccessRecorder(lambda records: reads.run(lambda d: record_access(d, records)))
    limits = Limits(rate_per_s=100_000.0, rate_burst=100_000, auth_failures=100_000)
    service = Service(reads, lambda: RULES, recorder, limits=limits, now=lambda: now)
    return TestClient(create_app(Settings(), reads, lambda: RULES, service=service), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def paid_world(tmp_path_factory):
    with seeded_database(tmp_path_factory.mktemp("payments")) as (db, seeded):
        seed_payments(db, seeded["numbers"], seeded["replacements"]["t03"])
        with make_client(db) as http:
            yield db, seeded, http


def get(http: TestClient, seeded: dict, tenant: str, url: str) -> Any:
    answer = http.get(url, headers=bearer(seeded["tokens"][tenant]))
    assert answer.status_code == 200, (url, answer.text)
    return answer.json()


# -- how each invoice is paid ----------------------------------------------------------------

PAID_FIELDS = ("paid", "credited", "written_off", "outstanding", "payment_state", "overdue", "due_date",
               "amount_due", "settled")


def test_each_invoice_says_what_is_paid_what_is_left_and_whether_it_is_late(paid_world):
    _, seeded, http = paid_world
    numbers, replacement = seeded["numbers"], seeded["replacements"]["t03"]

    def fields(tenant: str) -> dict[str, tuple]:
        return {i["number"]: tuple(i[name] for name in PAID_FIELDS)
                for i in get(http, seeded, tenant, "/v1/invoices")["invoices"]}

    # paid, credited, written off, outstanding, state, overdue, due date, amount_due (= outstanding), settled
    assert fields("t01") == {numbers["t01"]: (
        "3000.00", "0.00", "0.00", "4621.40", "partially_paid", True, "2026-04-25", "4621.40", False)}
    assert fields("t02") == {numbers["t02"]: (  # 3,800.10 + 5.30 = 3,805.40: covered
        "3800.10", "5.30", "0.00", "0.00", "paid", False, "2026-04-25", "0.00", True)}
    assert fields("t03") == {
        replacement: ("897.40", "0.00", "1000.00", "0.00", "partially_paid", False, "2026-05-02", "0.00", True),
        # voided: its void credit note covers it, it asks for nothing and has no due date
        numbers["t03"]: ("0.00", "1897.40", "0.00", "0.00", "paid", False, None, "0.00", True)}


def test_before_the_due_date_an_unpaid_invoice_is_not_overdue(paid_world):
    db, seeded, _ = paid_world
    # as of 2026-04-24 GB-…01 (due 04-25) has pay-t01-a's 3,000.00 (received 04-20; pay-t01-b came and was
    # reversed by then): 4,621.40 left, not late yet; nor on the due date itself; late the day after
    with make_client(db, at("2026-04-24")) as http:
        (invoice,) = get(http, seeded, "t01", "/v1/invoices")["invoices"]
        assert (invoice["paid"], invoice["outstanding"], invoice["overdue"]) == ("3000.00", "4621.40", False)
    with make_client(db, at("2026-04-25")) as http:
        assert get(http, seeded, "t01", "/v1/invoices")["invoices"][0]["overdue"] is False
    with make_client(db, at("2026-04-26")) as http:
        assert get(http, seeded, "t01", "/v1/invoices")["invoices"][0]["overdue"] is True
    # before any payment (04-19) nothing is paid: unpaid, the whole 7,621.40 outstanding
    with make_client(db, at("2026-04-19")) as http:
        (invoice,) = get(http, seeded, "t01", "/v1/invoices")["invoices"]
        assert (invoice["paid"], invoice["outstanding"], invoice["payment_state"]) == ("0.00", "7621.40", "unpaid")


def test_the_balance_says_what_is_outstanding_past_due_and_held(paid_world):
    _, seeded, http = paid_world
    t01, t02, t03 = (get(http, seeded, t, "/v1/balance") for t in ("t01", "t02", "t03"))
    # t01: 4,621.40 outstanding, all past due; owed = invoiced 7,621.40 − paid 3,000.00 (the bounced 100 not)
    assert (t01["outstanding"], t01["past_due"], t01["unapplied"], t01["owed"], t01["payments"]) == (
        "4621.40", "4621.40", "0.00", "4621.40", "3000.00")
    # t02: nothing outstanding, 199.90 held; it owes nothing, its balance is the credit
    assert (t02["outstanding"], t02["past_due"], t02["unapplied"], t02["owed"], t02["balance"]) == (
        "0.00", "0.00", "199.90", "0.00", "199.90")
    # t03: 897.40 paid + 1,000.00 written off = 1,897.40: nothing owed, nothing held
    assert (t03["outstanding"], t03["unapplied"], t03["owed"], t03["written_off"], t03["payments"]) == (
        "0.00", "0.00", "0.00", "1000.00", "897.40")


# -- payments --------------------------------------------------------------------------------

def test_each_tenant_lists_its_own_payments_newest_first(paid_world):
    _, seeded, http = paid_world
    numbers, replacement = seeded["numbers"], seeded["replacements"]["t03"]
    assert get(http, seeded, "t01", "/v1/payments") == {"payments": [
        # reversed: its allocation undone (net 0, not listed), nothing held
        {"ref": "pay-t01-b", "amount": "100.00", "currency": "CNY", "method": "wechat", "received_on": "2026-04-21",
         "allocations": [], "unapplied": "0.00", "reversed_on": "2026-04-22"},
        {"ref": "pay-t01-a", "amount": "3000.00", "currency": "CNY", "method": "bank", "received_on": "2026-04-20",
         "allocations": [{"invoice": numbers["t01"], "amount": "3000.00"}], "unapplied": "0.00", "reversed_on": None}]}
    assert get(http, seeded, "t02", "/v1/payments")["payments"] == [
        {"ref": "pay-t02-a", "amount": "4000.00", "currency": "CNY", "method": "alipay", "received_on": "2026-04-28",
         "allocations": [{"invoice": numbers["t02"], "amount": "3800.10"}], "unapplied": "199.90",
         "reversed_on": None}]
    (t03,) = get(http, seeded, "t03", "/v1/payments")["payments"]
    assert (t03["allocations"], t03["unapplied"]) == ([{"invoice": replacement, "amount": "897.40"}], "0.00")
    operator = http.get("/v1/payments?tenant=t02", headers=bearer(seeded["tokens"]["operator"]))
    assert [p["ref"] for p in operator.json()["payments"]] == ["pay-t02-a"]


# -- the statement of account ---------------------------------------------------------------

def lines(body: dict) -> list[tuple]:
    return [(e["date"], e["kind"], e["document"], e["amount"], e["balance"]) for e in body["entries"]]


def test_the_statement_runs_from_the_opening_to_the_closing_balance(paid_world):
    _, seeded, http = paid_world
    numbers, replacement = seeded["numbers"], seeded["replacements"]["t03"]
    april = get(http, seeded, "t01", "/v1/statement?from=2026-04-01&to=2026-04-30")
    assert (april["tenant"], april["from"], april["to"], april["currency"], april["opening_balance"]) == (
        "t01", "2026-04-01", "2026-04-30", "CNY", "0.00")
    assert lines(april) == [
        ("2026-04-10", "invoice", numbers["t01"], "7621.40", "7621.40"),
        ("2026-04-20", "payment", "pay-t01-a", "-3000.00", "4621.40"),      # 7,621.40 − 3,000.00
        ("2026-04-21", "payment", "pay-t01-b", "-100.00", "4521.40"),
        ("2026-04-22", "payment_reversed", "pay-t01-b", "100.00", "4621.40")]
    # charges 7,621.40 + 100.00 = 7,721.40; credits −3,000.00 − 100.00 = −3,100.00; 0 + 7,721.40 − 3,100.00 = 4,621.40
    assert (april["charges"], april["credits"], april["closing_balance"]) == ("7721.40", "-3100.00", "4621.40")
    # the aging as of 04-30: due 04-25, 5 days past — all of it in 1–30 days
    assert april["aging"] == {"current": "0.00", "d1_30": "4621.40", "d31_60": "0.00", "d61_90": "0.00",
                              "d90_plus": "0.00", "outstanding": "4621.40", "unapplied": "0.00"}
    assert april["buyer"]["tenant"] == "t01" and april["buyer"]["display_name"] == NAMES["t01"]
    # from the 21st: what came before is the opening; one day, one line
    one_day = get(http, seeded, "t01", "/v1/statement?from=2026-04-21&to=2026-04-21")
    assert (one_day["opening_balance"], lines(one_day), one_day["closing_balance"]) == (
        "4621.40", [("2026-04-21", "payment", "pay-t01-b", "-100.00", "4521.40")], "4521.40")
    # no dates: this month to today (2026-06-01 … 06-15): nothing moved, opening = closing
    this_month = get(http, seeded, "t01", "/v1/statement")
    assert (this_month["from"], this_month["to"], this_month["opening_balance"], this_month["entries"],
            this_month["closing_balance"]) == ("2026-06-01", "2026-06-15", "4621.40", [], "4621.40")
    # 51 days past due on 06-15 (04-25 + 51): in 31–60 days
    assert (this_month["aging"]["d31_60"], this_month["aging"]["d1_30"]) == ("4621.40", "0.00")
    # only `to`: from the first of its month
    assert get(http, seeded, "t01", "/v1/statement?to=2026-04-21")["from"] == "2026-04-01"
    # t02 ends holding credit: a negative balance
    t02 = get(http, seeded, "t02", "/v1/statement?from=2026-04-01&to=2026-04-30")
    assert lines(t02) == [("2026-04-10", "invoice", numbers["t02"], "3805.40", "3805.40"),
                          ("2026-04-15", "credit_note", "CN-2026-000001", "-5.30", "3800.10"),
                          ("2026-04-28", "payment", "pay-t02-a", "-4000.00", "-199.90")]
    # t03: voided, replaced, partly paid, the rest written off: back to zero
    t03 = get(http, seeded, "t03", "/v1/statement?from=2026-01-01&to=2026-12-31")
    assert lines(t03) == [("2026-04-10", "invoice", numbers["t03"], "1897.40", "1897.40"),
                          ("2026-04-16", "credit_note", "CN-2026-000002", "-1897.40", "0.00"),
                          ("2026-04-17", "invoice", replacement, "1897.40", "1897.40"),
                          ("2026-05-10", "payment", "pay-t03-a", "-897.40", "1000.00"),
                          ("2026-06-01", "write_off", replacement, "-1000.00", "0.00")]
    assert (t03["opening_balance"], t03["closing_balance"]) == ("0.00", "0.00")
    assert get(http, seeded, "t02", "/v1/statement?from=2026-04-01&to=2026-04-30")["aging"]["unapplied"] == "199.90"


def test_the_closing_balance_is_what_is_outstanding_less_what_is_held(paid_world):
    # one account, two views: the statement to today closes at outstanding − unapplied (billing_rules.accounts)
    _, seeded, http = paid_world
    for tenant in SECONDS:
        closing = Decimal(get(http, seeded, tenant, "/v1/statement?from=2026-01-01")["closing_balance"])
        balance = get(http, seeded, tenant, "/v1/balance")
        invoices = get(http, seeded, tenant, "/v1/invoices")["invoices"]
        outstanding = sum((Decimal(i["outstanding"]) for i in invoices), Decimal(0))
        assert outstanding == Decimal(balance["outstanding"]), tenant
        assert closing == outstanding - Decimal(balance["unapplied"]), tenant


def test_the_statement_downloads_as_the_command_writes_it(paid_world):
    # `gpubill statement --format json|csv|pdf` writes reports.render.render_statement of statement_document: the
    # API serves the same bytes, named statement_TENANT_FROM_TO.FMT (a Chinese PDF .zh-CN.pdf)
    from reports.render import render_statement
    from reports.statement import statement_document

    db, seeded, http = paid_world
    document = statement_document(db, RULES, "t01", date(2026, 4, 1), date(2026, 4, 30))
    for fmt, lang, media, name in (("json", "en", "application/json", "statement_t01_2026-04-01_2026-04-30.json"),
                                   ("csv", "en", "text/csv; charset=utf-8", "statement_t01_2026-04-01_2026-04-30.csv"),
                                   ("pdf", "en", "application/pdf", "statement_t01_2026-04-01_2026-04-30.pdf"),
                                   ("pdf", "zh-CN", "application/pdf", "statement_t01_2026-04-01_2026-04-30.zh-CN.pdf")):
        answer = http.get(f"/v1/statement?from=2026-04-01&to=2026-04-30&format={fmt}&lang={lang}",
                          headers=bearer(seeded["tokens"]["t01"]))
        assert answer.status_code == 200, answer.text
        assert (answer.headers["content-type"], answer.headers["content-disposition"]) == (
            media, f'attachment; filename="{name}"')
        assert answer.content == render_statement(document, fmt, lang=lang), (fmt, lang)
    csv_text = http.get("/v1/statement?from=2026-04-01&to=2026-04-30&format=csv",
                        headers=bearer(seeded["tokens"]["t01"])).text
    assert csv_text.splitlines()[-1].endswith(",4621.40")  # the closing balance row, by hand above


# -- bad parameters: one 400 problem naming the parameter ----------------------------------------

@pytest.mark.parametrize(("url", "param"), [
    ("/v1/statement?from=2026-13-01", "from"), ("/v1/statement?from=2026-02-30", "from"),
    ("/v1/statement?from=20260301", "from"), ("/v1/statement?from=2026-3-1", "from"),
    ("/v1/statement?to=yesterday", "to"), ("/v1/statement?to=2026-04-31", "to"),
    ("/v1/statement?from=２０２６-03-01", "from"), ("/v1/statement?from=2026-03-01%00", "from"),
    ("/v1/statement?from=2026-04-02&to=2026-04-01", "from"),  # backwards
    ("/v1/statement?from=2026-06-16", "from"),  # after today (2026-06-15), `to` left out
    ("/v1/statement?from=2026-04-01&from=2026-04-02", "from"), ("/v1/statement?format=xlsx", "format"),
    ("/v1/statement?lang=fr", "lang"), ("/v1/statement?start=2026-04-01", "start"),
    ("/v1/statement?tenant=t01", "tenant"), ("/v1/statement?to=" + "9" * 300, "to"),
    ("/v1/payments?tenant=t01", "tenant"), ("/v1/payments?ref=pay-t02-a", "ref"),
    ("/v1/payments?from=2026-04-01", "from"),
])
def test_bad_parameters_are_one_400_problem_naming_the_parameter(paid_world, url, param):
    _, seeded, http = paid_world
    answer = http.get(url, headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert set(body) == {"type", "title", "status", "detail", "param"}  # one problem, not a list of them
    assert (body["status"], body["param"], body["title"]) == (400, param, "Bad Request")
    assert body["detail"].startswith(param), body


def test_an_operator_must_name_the_tenant(paid_world):
    _, seeded, http = paid_world
    operator = bearer(seeded["tokens"]["operator"])
    for url in ("/v1/payments", "/v1/statement?from=2026-04-01&to=2026-04-30"):
        answer = http.get(url, headers=operator)
        assert answer.status_code == 400 and answer.json()["param"] == "tenant"
    named = http.get("/v1/statement?from=2026-04-01&to=2026-04-30&tenant=t02", headers=operator).json()
    assert named["tenant"] == "t02" and named["closing_balance"] == "-199.90"


# -- one tenant never sees another's payments, invoices' payment state or statement ---------------

def _victim_urls(victim: str, seeded: dict) -> list[str]:
    numbers = [seeded["numbers"][victim]] + ([seeded["replacements"][victim]] if victim in seeded["replacements"] else [])
    urls = ["/v1/payments", f"/v1/payments?tenant={victim}", "/v1/invoices", f"/v1/invoices?tenant={victim}",
            "/v1/balance", f"/v1/balance?tenant={victim}", "/v1/statement", f"/v1/statement?tenant={victim}",
            "/v1/statement?from=2000-01-01&to=2099-12-31", f"/v1/statement?from=2000-01-01&to=2099-12-31&tenant={victim}",
            "/v1/credit-notes", "/v1/me", "/v1/usage/current"]
    urls += [f"/v1/payments?ref={ref}" for ref in PAYMENTS[victim]]
    urls += [f"/v1/statement?from=2026-04-01&to=2026-06-15&format={fmt}&lang={lang}" for fmt in ("csv", "pdf")
             for lang in ("en", "zh-CN")]
    urls += [f"/v1/invoices/{number}?format={fmt}" for number in numbers for fmt in ("json", "csv", "pdf")]
    return urls


def _victim_traces(victim: str, seeded: dict) -> list[bytes]:
    numbers = [seeded["numbers"][victim]] + ([seeded["replacements"][victim]] if victim in seeded["replacements"] else [])
    return [*(ref.encode() for ref in PAYMENTS[victim]), *(n.encode() for n in numbers + seeded["credit_notes"][victim]),
            f'"{victim}"'.encode(), NAMES[victim].encode(), f"GPU-{victim}".encode()]


def test_sweep_no_tenant_sees_another_s_payments_or_statement(paid_world):
    _, seeded, http = paid_world
    swept = 0
    for reader in SECONDS:
        for victim in set(SECONDS) - {reader}:
            for url in _victim_urls(victim, seeded):
                answer = http.get(url, headers=bearer(seeded["tokens"][reader]))
                assert answer.status_code in (200, 400, 404), (reader, url, answer.status_code)
                for trace in _victim_traces(victim, seeded):
                    assert trace not in answer.content, (reader, url, trace)
                if url.startswith("/v1/invoices/"):  # another's number is the 404 of a number nobody has
                    nobody = http.get(re.sub(r"GB-[0-9]{4}-[0-9]{6}", "GB-2026-999999", url),
                                      headers=bearer(seeded["tokens"][reader]))
                    assert (answer.status_code, answer.content) == (404, nobody.content), url
                swept += 1
            # what the reader does see is its own: every payment, invoice and statement line
            own = get(http, seeded, reader, "/v1/statement?from=2000-01-01&to=2099-12-31")
            assert own["tenant"] == reader and all(e["document"] not in _documents_of(victim, seeded)
                                                   for e in own["entries"])
            refs = {p["ref"] for p in get(http, seeded, reader, "/v1/payments")["payments"]}
            assert refs == set(PAYMENTS[reader])
    assert swept == sum(len(_victim_urls(v, seeded)) for r in SECONDS for v in set(SECONDS) - {r})


def _documents_of(tenant: str, seeded: dict) -> set[str]:
    return ({seeded["numbers"][tenant], seeded["replacements"].get(tenant, "")} | set(seeded["credit_notes"][tenant])
            | set(PAYMENTS[tenant])) - {""}


def test_sweep_of_the_page(paid_world):
    # the page reads through the same Service: a reader's page, with any statement range, holds none of
    # another tenant's payments, invoices or statement lines
    _, seeded, http = paid_world
    for reader in SECONDS:
        browser = _page(http, seeded["tokens"][reader])
        for query in ("", "?from=2000-01-01&to=2099-12-31", "?lang=zh-CN&from=2026-04-01&to=2026-06-15"):
            page = browser.get(f"/{query}").content
            for victim in set(SECONDS) - {reader}:
                for trace in _victim_traces(victim, seeded):
                    assert trace not in page, (reader, victim, query, trace)


# -- the page, with the real Service -----------------------------------------------------------

def _page(http: TestClient, token: str) -> TestClient:
    browser = TestClient(http.app, base_url="http://portal.test")
    csrf = re.search(r'name="csrf" value="([^"]+)"', browser.get("/").text).group(1)
    signed = browser.post("/session", data={"key": token, "csrf": csrf}, headers={"Origin": "http://portal.test"},
                          follow_redirects=False)
    assert signed.status_code == 303, signed.text
    return browser


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _row(page: str, attribute: str, value: str) -> str:
    found = re.search(rf'<tr data-{attribute}="{re.escape(value)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, (attribute, value)
    return _text(found.group(1))


@pytest.mark.parametrize(("lang", "words"), [
    ("en", {"partly": "Partially paid", "paid": "Paid", "overdue": "Overdue", "owed": "Owed (postpaid)",
            "note": "outstanding on invoices ¥4,621.40 + not invoiced yet ¥0.00", "past_due": "of which overdue ¥4,621.40",
            "opening": "Opening balance", "closing": "Closing balance", "payment": "Payment pay-t01-a",
            "reversed": "Reversed 2026-04-22", "bank": "Bank transfer", "written_off": "written off ¥1,000.00",
            "held": "Credit held"}),
    ("zh-CN", {"partly": "部分付款", "paid": "已付清", "overdue": "已逾期", "owed": "应付（后付费）",
               "note": "账单未付 ¥4,621.40 + 尚未开账单 ¥0.00", "past_due": "其中逾期 ¥4,621.40",
               "opening": "期初余额", "closing": "期末余额", "payment": "付款 pay-t01-a",
               "reversed": "已于 2026-04-22 冲正", "bank": "银行转账", "written_off": "已核销 ¥1,000.00",
               "held": "持有余额"}),
])
def test_the_page_shows_paid_outstanding_overdue_the_statement_and_the_payments(paid_world, lang, words):
    _, seeded, http = paid_world
    browser = _page(http, seeded["tokens"]["t01"])
    page = browser.get(f"/?lang={lang}&from=2026-04-01&to=2026-04-30").text
    row = _row(page, "invoice", seeded["numbers"]["t01"])
    assert "¥7,621.40" in row and "¥3,000.00" in row and "¥4,621.40" in row
    assert words["partly"] in row and words["overdue"] in row
    assert 'data-payment-state="partially_paid"' in page and "data-overdue" in page
    money = _text(re.search(r'<section class="card money".*?</section>', page, re.S).group(0))
    assert words["owed"] in money and words["note"] in money and words["past_due"] in money
    # the statement of April: 0.00, then the invoice, the payment, the bounced one and its reversal: 4,621.40
    statement = re.search(r'<section class="card statement".*?</section>', page, re.S).group(0)
    assert re.search(r'id="statement-opening">¥0.00<', statement)
    assert re.search(r'id="statement-closing">¥4,621.40<', statement)
    assert re.findall(r'<tr data-entry="([a-z_]+)"', statement) == ["invoice", "payment", "payment", "payment_reversed"]
    assert words["payment"] in _text(statement) and "−¥3,000.00" in _text(statement)
    assert 'name="from" value="2026-04-01"' in statement and 'name="to" value="2026-04-30"' in statement
    # the payments, newest first; the bounced one marked
    assert re.findall(r'<tr data-payment="([^"]+)"', page) == ["pay-t01-b", "pay-t01-a"]
    assert words["reversed"] in _row(page, "payment", "pay-t01-b")
    assert words["bank"] in _row(page, "payment", "pay-t01-a") and seeded["numbers"]["t01"] in _row(
        page, "payment", "pay-t01-a")
    # t02 is paid and holds credit; t03's replacement is partly paid, the rest written off
    t02 = _page(http, seeded["tokens"]["t02"]).get(f"/?lang={lang}").text
    assert words["paid"] in _row(t02, "invoice", seeded["numbers"]["t02"]) and "data-overdue" not in t02
    assert words["held"] in t02 and 'id="credit-held">¥199.90<' in t02
    t03 = _page(http, seeded["tokens"]["t03"]).get(f"/?lang={lang}").text
    replacement = _row(t03, "invoice", seeded["replacements"]["t03"])
    assert words["partly"] in replacement and words["written_off"] in replacement


def test_the_page_says_a_backwards_range_cannot_be_shown_and_keeps_the_rest(paid_world):
    _, seeded, http = paid_world
    browser = _page(http, seeded["tokens"]["t01"])
    for lang, said in (("en", "Choose two dates, the first on or before the second."),
                       ("zh-CN", "请选择两个日期，起始日期不晚于截止日期。")):
        page = browser.get(f"/?lang={lang}&from=2026-05-01&to=2026-04-01")
        assert page.status_code == 200 and said in page.text and 'id="statement-opening"' not in page.text
        assert 'id="invoices"' in page.text and 'id="payments"' in page.text
    # a day not in the calendar the same way; what is not a date at all is not put back in the form
    assert 'id="statement-error"' in browser.get("/?from=2026-02-30").text
    page = browser.get("/?from=%3Cb%3E&to=2026-04-01").text
    assert 'id="statement-error"' in page and 'name="from" value=""' in page and "<b>" not in page


def test_the_json_api_and_the_page_agree_on_every_figure(paid_world):
    # one number, one function: the page's outstanding per invoice is the API's
    _, seeded, http = paid_world
    for tenant in SECONDS:
        page = _page(http, seeded["tokens"][tenant]).get("/").text
        for invoice in get(http, seeded, tenant, "/v1/invoices")["invoices"]:
            row = re.search(rf'<tr data-invoice="{invoice["number"]}".*?</tr>', page, re.S).group(0)
            shown = re.search(r'data-outstanding[^>]*>([^<]+)<', row).group(1)
            assert shown == f"¥{Decimal(invoice['outstanding']):,.2f}", (tenant, invoice["number"])
        closing = get(http, seeded, tenant, "/v1/statement")["closing_balance"]
        shown = re.search(r'id="statement-closing">([^<]+)<', page).group(1)
        assert shown.replace("\u2212", "-") == f"¥{Decimal(closing):,.2f}".replace("¥-", "-¥"), tenant


def test_today_is_the_billing_time_zone_s(paid_world):
    # 2026-06-14T17:00Z is 2026-06-15 01:00 in Asia/Shanghai: "this month to today" ends on the 15th
    db, seeded, _ = paid_world
    with make_client(db, datetime(2026, 6, 14, 17, 0, tzinfo=UTC)) as http:
        assert get(http, seeded, "t01", "/v1/statement")["to"] == str(date(2026, 6, 15))
