"""The tenant API over HTTP (FastAPI's TestClient) on a real embedded ClickHouse.

The world (`seed_world`): three registered tenants, each renting one A800 on the hourly plan,
¥3600/h = ¥1/s, for SECONDS[t] seconds at the start of March 2026 — so each March invoice's
rent line is ¥SECONDS[t] — invoiced once; a key per tenant, an operator key, a revoked and
an expired key of t01. Each March invoice: rent, the ¥10.00 trial credit, VAT 6 % of the net.

Then corrected (`seed_corrections`, issue 24): t01's invoice stands as it was issued;
    t02 GB-2026-000002: rent 3,600.00 − 10.00 = net 3,590.00, VAT 215.40, total 3,805.40;
        CN-2026-000001 (goodwill) credits ¥5.00 of its rent line: VAT 5.00 × 6 % = 0.30, total 5.30
    t03 GB-2026-000003: rent 1,800.00 − 10.00 = net 1,790.00, VAT 107.40, total 1,897.40, voided:
        CN-2026-000002 (void) credits the rent 1,800.00 and gives the trial credit back, −10.00:
        1,790.00 + VAT 107.40 = 1,897.40; the next run issues GB-2026-000004, which replaces it with
        the same figures (the trial credit, free again, is spent on the replacement)
"""

from __future__ import annotations

import re
import time
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from billing.credit_notes import create_credit_note, void_invoice
from billing.invoicing import run_period
from billing.tenants import add_tenant
from billing_rules import load_rules
from gpubill.config import Settings
from schemas.tables import RATED_SECONDS
from tenant_api.access_log import access_log
from tenant_api.app import create_app
from tenant_api.keys import create_key, revoke_key
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES_DIR = Path(__file__).parents[1] / "e2e" / "rules"
RULES = load_rules(RULES_DIR)
PERIOD = "2026-03"
INVOICED_AT = datetime(2026, 4, 10, tzinfo=UTC)
SECONDS = {"t01": 7200, "t02": 3600, "t03": 1800}
NAMES = {"t01": "Acme Render", "t02": "Beta Labs", "t03": "北京算力科技有限公司"}
USAGE_FORMATS = ("csv", "json", "parquet", "pdf")
INVOICE_FORMATS = ("json", "csv", "pdf")


def seed_world(db: Any) -> dict:
    """Tenants, rated rent rows, March invoices and keys; returns {"tokens", "numbers", "keys"}."""
    lo, _ = RULES.period_bounds(PERIOD)
    rows = []
    for n, (tenant, count) in enumerate(sorted(SECONDS.items())):
        add_tenant(db, tenant, NAMES[tenant], now=datetime(2026, 2, 1, tzinfo=UTC))
        for second in range(lo + 3600 * 3 * n, lo + 3600 * 3 * n + count):  # hours of its own each
            at = datetime.fromtimestamp(second, UTC)
            row = {c: 0 for c in RATED_SECONDS} | {
                "gpu_uuid": f"GPU-{tenant}", "second": at, "period": PERIOD, "tenant": tenant,
                "instance": f"i-{tenant}", "site": "gz-guian", "node": "gz-n1", "plan": "hourly",
                "gpu_model": "A800-80G", "stream": "rent", "rent_price": Decimal(3600), "rent_per_s": 3600,
                "discount_pct": Decimal(0), "util_pct": Decimal(50), "band": "", "tariff_per_kwh": Decimal(0),
                "pue": Decimal(0), "version": 1, "measured": 0, "rated_at": at, "src_partition": 0, "src_offset": second}
            rows.append([row[c] for c in RATED_SECONDS])
    db.insert("rated_seconds", rows, RATED_SECONDS)
    stamp_hours(db, {(PERIOD, (lo + 3600 * 3 * n) // 3600 * 3600 + 3600 * h)
                     for n in range(len(SECONDS)) for h in range(3)})
    time.sleep(0.01)
    run_period(db, RULES, PERIOD, now=INVOICED_AT)
    numbers = {str(t): str(n) for n, t in db.query("SELECT number, tenant FROM invoices FINAL")}
    tokens, keys = {}, {}
    for tenant in SECONDS:
        keys[tenant], tokens[tenant] = create_key(db, tenant=tenant, label=f"{tenant} automation")
    keys["operator"], tokens["operator"] = create_key(db, tenant=None, role="operator", label="support desk")
    keys["revoked"], tokens["revoked"] = create_key(db, tenant="t01", label="old")
    revoke_key(db, keys["revoked"].id)
    _, tokens["expired"] = create_key(db, tenant="t01", label="short", expires=date(2026, 1, 1),
                                      now=datetime(2025, 12, 1, tzinfo=UTC))
    return {"tokens": tokens, "numbers": numbers, "keys": keys}


CORRECTED_AT = datetime(2026, 4, 15, tzinfo=UTC)


def seed_corrections(db: Any, numbers: dict[str, str]) -> dict:
    """A goodwill credit note on t02's invoice; t03's voided and replaced (the module docstring's
    figures). Returns {"credit_notes": tenant → [numbers], "replacements": tenant → number}."""
    goodwill = create_credit_note(db, RULES, numbers["t02"], "goodwill", {1: Decimal("5.00")}, actor="test",
                                  now=CORRECTED_AT)
    _, void = void_invoice(db, RULES, numbers["t03"], "wrong customer", actor="test",
                           now=CORRECTED_AT + timedelta(days=1))
    run_period(db, RULES, PERIOD, now=CORRECTED_AT + timedelta(days=2))
    (replacement,) = [str(n) for (n,) in db.query(
        "SELECT number FROM invoices FINAL WHERE tenant = 't03' AND replaces = {r:String}", {"r": numbers["t03"]})]
    return {"credit_notes": {"t01": [], "t02": [goodwill.number], "t03": [void.number]},
            "replacements": {"t03": replacement}}


@contextmanager
def seeded_database(folder: Path):
    """A chDB database in `folder` holding the seeded world and its corrections: (db, seeded).
    Hours are rolled up as soon as they are written (writes.MARGIN_S 0) while it is open."""
    writes_margin = writes.MARGIN_S
    writes.MARGIN_S = 0
    try:
        with open_database(f"chdb://{folder / 'ch'}") as db:
            seeded = seed_world(db)
            yield db, seeded | seed_corrections(db, seeded["numbers"])
    finally:
        writes.MARGIN_S = writes_margin


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with seeded_database(tmp_path_factory.mktemp("api")) as seeded:
        yield seeded


def make_client(db: Any, **limits: Any) -> TestClient:
    settings = Settings(**{"api_auth_failures": 100_000, "api_rate_burst": 100_000, "api_rate_per_s": 100_000.0,
                           **limits})
    return TestClient(create_app(settings, db, lambda: RULES), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def client(world):
    db, _ = world
    with make_client(db) as http:
        yield http


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_me_names_the_key_s_own_tenant(client, world):
    _, seeded = world
    for tenant in SECONDS:
        answer = client.get("/v1/me", headers=bearer(seeded["tokens"][tenant]))
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["tenant"], body["display_name"], body["role"]) == (tenant, NAMES[tenant], "tenant")
        assert body["key_id"] == seeded["keys"][tenant].id and body["label"] == f"{tenant} automation"
    operator = client.get("/v1/me", headers=bearer(seeded["tokens"]["operator"])).json()
    assert (operator["tenant"], operator["role"]) == (None, "operator")


def test_usage_download_is_the_cli_s_report(client, world):
    from reports.render import render_usage
    from reports.usage_report import usage_report

    db, seeded = world
    report = usage_report(db, RULES, "t01", PERIOD)
    for fmt in ("csv", "json"):
        answer = client.get(f"/v1/usage?period={PERIOD}&format={fmt}", headers=bearer(seeded["tokens"]["t01"]))
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-disposition"] == f'attachment; filename="usage_t01_{PERIOD}.{fmt}"'
        expected = render_usage(report, fmt)
        if fmt == "json":  # generated_at is the build's own time
            got, want = orjson.loads(answer.content), orjson.loads(expected)
            got.pop("generated_at"), want.pop("generated_at")
            assert got == want
        else:
            assert answer.content == expected
    # by hand: 7200 s × ¥1/s = ¥7200.00, 2 GPU-hours, on one day
    csv = client.get(f"/v1/usage?period={PERIOD}", headers=bearer(seeded["tokens"]["t01"])).text
    assert "7200.00" in csv and "GPU-t01" in csv
    pdf = client.get(f"/v1/usage?period={PERIOD}&format=pdf&lang=zh-CN", headers=bearer(seeded["tokens"]["t03"]))
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF") and pdf.headers["content-type"] == "application/pdf"
    hourly = client.get(f"/v1/usage?period={PERIOD}&format=json&granularity=hour", headers=bearer(seeded["tokens"]["t01"]))
    assert hourly.status_code == 200 and len(orjson.loads(hourly.content)["rows"]) == 2  # two whole hours


def test_invoices_list_and_download(client, world):
    db, seeded = world
    answer = client.get("/v1/invoices", headers=bearer(seeded["tokens"]["t02"]))
    assert answer.status_code == 200
    (only,) = answer.json()["invoices"]
    # ¥1/s × 3600 s = ¥3600.00 before credits and VAT
    assert (only["number"], only["period"], only["subtotal"]) == (seeded["numbers"]["t02"], PERIOD, "3600.00")
    for fmt in INVOICE_FORMATS:
        got = client.get(f"/v1/invoices/{only['number']}?format={fmt}", headers=bearer(seeded["tokens"]["t02"]))
        assert got.status_code == 200, got.text
        assert got.headers["content-disposition"] == f'attachment; filename="{only["number"]}_t02_{PERIOD}.{fmt}"'
    # issue 36: the two languages of a PDF download under two names
    names = {client.get(f"/v1/invoices/{only['number']}?format=pdf&lang={lang}",
                        headers=bearer(seeded["tokens"]["t02"])).headers["content-disposition"] for lang in ("en", "zh-CN")}
    assert names == {f'attachment; filename="{only["number"]}_t02_{PERIOD}.pdf"',
                     f'attachment; filename="{only["number"]}_t02_{PERIOD}.zh-CN.pdf"'}
    usage = client.get(f"/v1/usage?period={PERIOD}&format=pdf&lang=zh-CN", headers=bearer(seeded["tokens"]["t02"]))
    assert usage.headers["content-disposition"] == f'attachment; filename="usage_t02_{PERIOD}.zh-CN.pdf"'
    invoice = client.get(f"/v1/invoices/{only['number']}", headers=bearer(seeded["tokens"]["t02"])).json()
    assert invoice["number"] == only["number"] and invoice["tenant"] == "t02"


def test_current_is_an_estimate_with_its_data_time(client, world):
    _, seeded = world
    answer = client.get("/v1/usage/current", headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["tenant"] == "t01" and body["estimate"] is True and body["currency"] == "CNY"
    assert {"gpu_hours", "kwh", "rent", "electricity", "credits", "vat", "estimated_total", "newest_data_at",
            "invoiced", "invoice_number", "period"} <= set(body)
    Decimal(body["estimated_total"])  # a decimal string, never a float


def test_balance_is_top_ups_less_invoices_and_estimates(client, world):
    db, seeded = world
    from billing.balances import top_up

    top_up(db, "t01", Decimal("5000.00"), "bank-20260402-t01")
    auth = bearer(seeded["tokens"]["t01"])
    body = client.get("/v1/balance", headers=auth).json()
    march = next(i for i in client.get("/v1/invoices", headers=auth).json()["invoices"] if i["period"] == PERIOD)
    assert body["tenant"] == "t01" and body["currency"] == "CNY" and body["top_ups"] == "5000.00"
    # nothing used this month (the clock is the real one; the world's usage is March, invoiced)
    assert body["estimated"] == "0" or Decimal(body["estimated"]) == 0
    assert Decimal(body["invoiced"]) == Decimal(march["total"])
    assert Decimal(body["balance"]) == Decimal("5000.00") - Decimal(march["total"])
    other = client.get("/v1/balance", headers=bearer(seeded["tokens"]["t02"])).json()
    assert other["tenant"] == "t02" and Decimal(other["top_ups"]) == 0  # t01's top-up is t01's alone
    # issue 36: t02 has no top-ups, so it is postpaid and owes what it is charged: its March total,
    # 3,805.40 less the goodwill note's 5.30 = 3,800.10 (the module docstring), and nothing estimated
    assert (body["prepaid"], body["owed"]) == (True, "0.00")
    assert (other["prepaid"], other["owed"], other["balance"]) == (False, "3800.10", "-3800.10")
    refused = client.get("/v1/balance?tenant=t01", headers=bearer(seeded["tokens"]["t02"]))
    assert refused.status_code == 400 and refused.json()["param"] == "tenant"


def test_balance_and_current_carry_the_streams_live_figures(client, world):
    db, seeded = world
    from datetime import UTC, datetime

    from billing_rules.spend import TenantPosition
    from billing.live_spend import store_positions

    auth = bearer(seeded["tokens"]["t01"])
    assert client.get("/v1/balance", headers=auth).json()["stream"] is None  # no worker priced it yet
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    position = TenantPosition("t01", "2026-12", Decimal("12.34"), Decimal("11.00"), None, Decimal("87.66"), Decimal("5.25"))
    store_positions(db, [("t01", (position, now_ms))])
    for path in ("/v1/balance", "/v1/usage/current"):
        live = client.get(path, headers=auth).json()["stream"]
        assert live["month_to_date"] == "12.34" and live["balance"] == "87.66" and live["runway_hours"] == "5.25"
        assert live["budget"] is None and live["as_of"].endswith("Z")
    # t02 sees its own (none), never t01's
    assert client.get("/v1/balance", headers=bearer(seeded["tokens"]["t02"])).json()["stream"] is None
    # a figure older than a minute is not shown as live
    store_positions(db, [("t02", (position, now_ms - 120_000))])
    assert client.get("/v1/balance", headers=bearer(seeded["tokens"]["t02"])).json()["stream"] is None


def test_operator_keys_choose_the_tenant(client, world):
    _, seeded = world
    operator = bearer(seeded["tokens"]["operator"])
    missing = client.get("/v1/invoices", headers=operator)
    assert missing.status_code == 400 and missing.json()["param"] == "tenant"
    answer = client.get("/v1/invoices?tenant=t03", headers=operator)
    # the replacement, then the voided invoice it replaces (the same period, by number, newest first)
    assert [i["number"] for i in answer.json()["invoices"]] == [seeded["replacements"]["t03"], seeded["numbers"]["t03"]]
    own = client.get("/v1/invoices?tenant=t01", headers=bearer(seeded["tokens"]["t01"]))
    assert own.status_code == 400 and own.json()["param"] == "tenant"
    notes = client.get("/v1/credit-notes?tenant=t03", headers=operator)
    assert [n["number"] for n in notes.json()["credit_notes"]] == seeded["credit_notes"]["t03"]
    assert client.get("/v1/credit-notes", headers=operator).json()["param"] == "tenant"
    own = client.get("/v1/credit-notes?tenant=t02", headers=bearer(seeded["tokens"]["t02"]))
    assert own.status_code == 400 and own.json()["param"] == "tenant"


def _documents(victim: str, seeded: dict) -> tuple[list[str], list[str]]:
    """`victim`'s invoice numbers (a voided one and its replacement too) and credit note numbers."""
    replacement = seeded["replacements"].get(victim)
    return [seeded["numbers"][victim]] + ([replacement] if replacement else []), seeded["credit_notes"][victim]


def _endpoints(victim: str, seeded: dict) -> list[str]:
    """Every route with every identifier of `victim`'s (its tenant id, its invoice and credit note numbers)."""
    invoices, credit_notes = _documents(victim, seeded)
    urls = ["/v1/me", f"/v1/me?tenant={victim}", "/v1/usage/current", f"/v1/usage/current?tenant={victim}",
            "/v1/invoices", f"/v1/invoices?tenant={victim}", "/v1/balance", f"/v1/balance?tenant={victim}",
            "/v1/credit-notes", f"/v1/credit-notes?tenant={victim}"]
    for fmt in USAGE_FORMATS:
        urls += [f"/v1/usage?period={PERIOD}&format={fmt}", f"/v1/usage?period={PERIOD}&format={fmt}&tenant={victim}",
                 f"/v1/usage?period={PERIOD}&format={fmt}&granularity=hour"]
    for kind, numbers in (("invoices", invoices), ("credit-notes", credit_notes)):
        for number in numbers:
            for fmt in INVOICE_FORMATS:
                urls += [f"/v1/{kind}/{number}?format={fmt}", f"/v1/{kind}/{number}?format={fmt}&tenant={victim}",
                         f"/v1/{kind}/{number.lower()}?format={fmt}", f"/v1/{kind}/{number}%20?format={fmt}",
                         f"/v1/{kind}/{number}?format={fmt}&lang=zh-CN"]
    return urls


def _traces(tenant: str, seeded: dict) -> list[bytes]:
    """Bytes that only `tenant`'s data holds."""
    invoices, credit_notes = _documents(tenant, seeded)
    return [f"GPU-{tenant}".encode(), f"i-{tenant}".encode(), NAMES[tenant].encode(), f'"{tenant}"'.encode(),
            f"_{tenant}_".encode(), *(number.encode() for number in invoices + credit_notes)]


def _not_there(url: str) -> str:
    """`url` with its document number swapped for one that does not exist (GB- or CN-2026-999999)."""
    return re.sub(r"^/v1/(invoices|credit-notes)/(GB|CN)-[0-9]{4}-[0-9]{6}\?", r"/v1/\1/\2-2026-999999?", url)


def test_idor_sweep_no_byte_of_another_tenant(client, world):
    _, seeded = world
    swept = {"invoices": 0, "credit-notes": 0}
    for reader in SECONDS:
        for victim in SECONDS:
            if reader == victim:
                continue
            for url in _endpoints(victim, seeded):
                answer = client.get(url, headers=bearer(seeded["tokens"][reader]))
                for trace in _traces(victim, seeded):
                    assert trace not in answer.content, (reader, url, trace)
                    assert trace.decode() not in str(answer.headers), (reader, url, trace)
                if _not_there(url) != url and "tenant=" not in url:
                    # another tenant's number answers exactly as a number that does not exist
                    not_there = client.get(_not_there(url), headers=bearer(seeded["tokens"][reader]))
                    assert (answer.status_code, answer.content) == (404, not_there.content), url
                    swept[url.split("/")[2]] += 1
    # each of the 4 invoices and the 2 credit notes, read by the 2 other tenants, in 3 formats, 2 ways
    assert swept == {"invoices": 4 * 2 * 3 * 2, "credit-notes": 2 * 2 * 3 * 2}


def _page_session(client: TestClient, token: str) -> TestClient:
    """A browser of the web page signed in with `token` (a client of its own: its own cookies)."""
    browser = TestClient(client.app, base_url="http://portal.test")
    csrf = re.search(r'name="csrf" value="([^"]+)"', browser.get("/").text).group(1)
    signed = browser.post("/session", data={"key": token, "csrf": csrf}, headers={"Origin": "http://portal.test"},
                          follow_redirects=False)
    assert signed.status_code == 303, signed.text
    return browser


def test_idor_sweep_of_the_page_s_files(client, world):
    # the page's downloads read through the same Service: another tenant's invoice or credit note
    # gets the page a number that does not exist gets, and the page shows nothing of that tenant's
    _, seeded = world
    for reader in SECONDS:
        browser = _page_session(client, seeded["tokens"][reader])
        page = browser.get("/").content
        for victim in set(SECONDS) - {reader}:
            invoices, credit_notes = _documents(victim, seeded)
            for kind, numbers, missing in (("invoices", invoices, "GB-2026-999999"),
                                           ("credit-notes", credit_notes, "CN-2026-999999")):
                for number in numbers:
                    for fmt in INVOICE_FORMATS:
                        for lang in ("en", "zh-CN"):
                            answer = browser.get(f"/files/{kind}/{number}?format={fmt}&lang={lang}")
                            nobody = browser.get(f"/files/{kind}/{missing}?format={fmt}&lang={lang}")
                            assert (answer.status_code, answer.content) == (404, nobody.content), (reader, number)
            for trace in _traces(victim, seeded):
                assert trace not in page, (reader, victim, trace)
        for number in seeded["credit_notes"][reader]:  # and its own are served
            assert browser.get(f"/files/credit-notes/{number}?format=pdf").content.startswith(b"%PDF-")


BAD_TOKENS = {
    "missing": None, "empty": "", "malformed": "gpb_nonsense", "huge": "gpb_" + "A" * 20_000,
    "unknown": "gpb_k_aaaaaaaaaaaaaaaa_" + "A" * 43, "basic": "Basic dXNlcjpwYXNz", "crlf": "gpb_x\r\nX-Evil: 1",
}


@pytest.mark.parametrize("url", ["/v1/me", f"/v1/usage?period={PERIOD}", "/v1/usage/current", "/v1/invoices",
                                 "/v1/invoices/GB-2026-000001", "/v1/credit-notes", "/v1/credit-notes/CN-2026-000001"])
def test_bad_keys_are_401(client, world, url):
    _, seeded = world
    tokens = dict(BAD_TOKENS) | {"revoked": seeded["tokens"]["revoked"], "expired": seeded["tokens"]["expired"],
                                 "lowercase-scheme": None}
    for name, token in tokens.items():
        if name == "missing":
            headers = {}
        elif name == "basic":
            headers = {"Authorization": token}
        elif name == "lowercase-scheme":
            headers = {"Authorization": "bearer " + seeded["tokens"]["revoked"]}
        elif name == "crlf":
            continue  # httpx refuses to send it; uvicorn's parser would too
        else:
            headers = bearer(token)
        answer = client.get(url, headers=headers)
        assert answer.status_code == 401, (name, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["www-authenticate"].startswith("Bearer")
        assert answer.json()["status"] == 401 and answer.json()["detail"]
    two = client.get(url, headers=[("Authorization", "Bearer " + seeded["tokens"]["t01"]),
                                   ("Authorization", "Bearer " + seeded["tokens"]["t02"])])
    assert two.status_code == 401


def test_an_operator_s_unknown_tenant_has_no_balance_and_hourly_pdfs_are_refused(client, world):
    # before: both were 500 "an unexpected error" (the Service called a method it does not have)
    _, seeded = world
    unknown = client.get("/v1/balance?tenant=nosuch", headers=bearer(seeded["tokens"]["operator"]))
    assert unknown.status_code == 404 and unknown.json()["detail"] == "no registered tenant 'nosuch'"
    hourly = client.get(f"/v1/usage?period={PERIOD}&format=pdf&granularity=hour", headers=bearer(seeded["tokens"]["t01"]))
    assert hourly.status_code == 400 and hourly.json()["param"] == "granularity"
    page = _page_session(client, seeded["tokens"]["operator"])
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.get("/").text).group(1)
    page.post("/tenant", data={"tenant": "nosuch", "csrf": csrf}, headers={"Origin": "http://portal.test"})
    shown = page.get("/")
    assert shown.status_code == 200 and 'id="money"' not in shown.text and 'id="summary"' in shown.text
    assert 'id="statement-error"' in shown.text  # issue 38: no statement of a tenant nobody registered


def test_a_month_not_begun_is_404_naming_the_period(client, world):
    # issue 36: the schema's pattern admits 2099-01; a 400 contradicted it (schemathesis ST202)
    _, seeded = world
    answer = client.get("/v1/usage?period=2099-01", headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 404 and answer.json()["param"] == "period"
    assert answer.json()["detail"] == "period: 2099-01 has not begun: there is no report of it"


def test_a_period_out_of_range_is_named_as_sent(client, world):
    # issue 21, finding 9: period=9999-12 answered "got '10000-01'"; issue 36: a well-formed month
    # with no report is 404 (the schema's pattern admits it, so a 400 would contradict the schema)
    _, seeded = world
    answer = client.get("/v1/usage?period=9999-12", headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 404 and answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["param"] == "period" and "9999-12" in problem["detail"] and "10000" not in problem["detail"]


def test_brute_force_is_slowed_down_per_address_and_key_id(world):
    db, seeded = world
    guessed = f"gpb_{seeded['keys']['t02'].id}_" + BAD_TOKENS["unknown"][-43:]
    with make_client(db, api_auth_failures=5, api_auth_window_s=60) as http:
        for _ in range(5):
            assert http.get("/v1/me", headers=bearer(guessed)).status_code == 401
        blocked = http.get("/v1/me", headers=bearer(guessed))
        assert blocked.status_code == 429 and 1 <= int(blocked.headers["retry-after"]) <= 60
        # the right secret of that key id from that address waits too: guessing must not pay off
        assert http.get("/v1/me", headers=bearer(seeded["tokens"]["t02"])).status_code == 429
        # but another key at the same address (behind the same TLS proxy) is not locked out
        assert http.get("/v1/me", headers=bearer(seeded["tokens"]["t01"])).status_code == 200
    with TestClient(create_app(Settings(api_auth_failures=5), db, lambda: RULES), client=("10.9.9.9", 1234)) as other:
        assert other.get("/v1/me", headers=bearer(seeded["tokens"]["t02"])).status_code == 200


def test_guessing_from_rotating_addresses_meets_the_key_limit_and_the_ceiling(world):
    # issue 21, finding 8: 120 failures from rotating addresses without a single 429
    from tenant_api.keys import new_key_id

    db, seeded = world
    secret = BAD_TOKENS["unknown"][-43:]
    target = seeded["keys"]["t03"].id
    settings = Settings(api_auth_failures=10, api_auth_key_failures=20, api_auth_failures_ceiling=60,
                        api_rate_burst=100_000, api_rate_per_s=100_000.0)
    app = create_app(settings, db, lambda: RULES)

    def get(address: str, token: str) -> int:
        # a client per address, all on the one running app (its lifespan entered once, below)
        return TestClient(app, client=(address, 1234)).get("/v1/me", headers=bearer(token)).status_code

    with TestClient(app):
        assert get("10.1.1.1", seeded["tokens"]["t03"]) == 200  # t03's holder, from its address
        codes = [get(f"192.0.2.{n}", f"gpb_{target}_{secret}") for n in range(30)]
        assert codes == [401] * 20 + [429] * 10  # one key id, rotating addresses
        assert get("10.1.1.1", seeded["tokens"]["t03"]) == 200  # its holder still gets in
        codes = [get(f"198.51.100.{n}", f"gpb_{new_key_id()}_{secret}") for n in range(40)]
        assert codes == [401] * 39 + [429]  # random ids: past 60 failures in all, a failure is 429
        assert get("203.0.113.9", seeded["tokens"]["t01"]) == 200  # a valid key still works, from anywhere
        assert get("203.0.113.9", f"gpb_{new_key_id()}_{secret}") == 429


def test_rate_limit_per_key_with_retry_after(world):
    db, seeded = world
    # one token back per 100 s: a loaded machine taking seconds over these requests refills none
    with make_client(db, api_rate_per_s=0.01, api_rate_burst=3) as http:
        codes = [http.get("/v1/me", headers=bearer(seeded["tokens"]["t01"])).status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        limited = http.get("/v1/me", headers=bearer(seeded["tokens"]["t01"]))
        assert 90 <= int(limited.headers["retry-after"]) <= 100  # one token back at 0.01/s, less what refilled
        assert http.get("/v1/me", headers=bearer(seeded["tokens"]["t02"])).status_code == 200  # per key


def test_downloads_in_flight_are_capped_per_key(world):
    db, seeded = world
    with make_client(db, api_downloads_per_key=1) as http:
        service = http.app.state.service
        slot = service.downloads.acquire(seeded["keys"]["t01"].id)
        with slot:
            answer = http.get(f"/v1/usage?period={PERIOD}", headers=bearer(seeded["tokens"]["t01"]))
            assert answer.status_code == 429 and answer.headers["retry-after"] == "1"
            assert http.get(f"/v1/usage?period={PERIOD}", headers=bearer(seeded["tokens"]["t02"])).status_code == 200
        assert http.get(f"/v1/usage?period={PERIOD}", headers=bearer(seeded["tokens"]["t01"])).status_code == 200


@pytest.mark.parametrize(("query", "param"), [
    ("", "period"), ("period=2026-3", "period"), ("period=2026-13", "period"),
    ("period=2026-03&format=exe", "format"), ("period=2026-03&format=CSV", "format"),
    ("period=2026-03&granularity=minute", "granularity"), ("period=2026-03&lang=fr", "lang"),
    ("period=2026-03&period=2026-02", "period"), ("period=2026-03&formt=pdf", "formt"),
    ("period=" + "9" * 300, "period"), ("period=2026-03%00", "period"), ("period=２０２６-03", "period"),
])
def test_bad_parameters_are_400_naming_the_parameter(client, world, query, param):
    _, seeded = world
    answer = client.get(f"/v1/usage?{query}", headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 400, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["param"] == param and body["title"] == "Bad Request" and body["type"] == "about:blank"
    assert body["detail"].startswith(param)


@pytest.mark.parametrize("number", ["..%2F..%2Fetc%2Fpasswd", "GB-2026-000001%0D%0AX-Evil:%201", "%00",
                                    "GB-2026-" + "1" * 5000, "GB-2026-00000１", "GB-2026-000001.pdf"])
def test_hostile_invoice_numbers_are_404(client, world, number):
    _, seeded = world
    answer = client.get(f"/v1/invoices/{number}?format=pdf", headers=bearer(seeded["tokens"]["t01"]))
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/problem+json"
    assert "x-evil" not in answer.headers and "content-disposition" not in answer.headers


def test_framework_errors_are_problem_json(client, world):
    _, seeded = world
    for method, url, status in (("GET", "/v2/nothing", 404), ("POST", "/v1/me", 405), ("DELETE", "/v1/invoices", 405)):
        answer = client.request(method, url, headers=bearer(seeded["tokens"]["t01"]))
        assert answer.status_code == status
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.json()["status"] == status and answer.json()["detail"]


def test_operations_endpoints(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok", "rules": "ok", "access_log": "ok"}
    assert b"gpubill_api_requests_total" in client.get("/metrics").content
    spec = client.get("/openapi.json").json()
    assert {"/v1/me", "/v1/usage", "/v1/usage/current", "/v1/invoices", "/v1/invoices/{number}", "/v1/credit-notes",
            "/v1/credit-notes/{number}"} <= set(spec["paths"])
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/v1/usage" in docs.text and "<script" not in docs.text


def test_downloads_and_refusals_are_recorded(world):
    db, seeded = world
    started = datetime.now(UTC).replace(microsecond=0)
    # a key of this test's own: the other tests' refusals of the world's revoked key may fall in this second
    revoked, revoked_token = create_key(db, tenant="t01", label="revoked here")
    revoke_key(db, revoked.id)
    with make_client(db) as http:
        got = http.get(f"/v1/usage?period={PERIOD}&format=json", headers=bearer(seeded["tokens"]["t02"]))
        refused = http.get("/v1/invoices", headers=bearer(revoked_token))
        assert (got.status_code, refused.status_code) == (200, 401)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # written within a second (FLUSH_S), without a stop
            records = [r for r in access_log(db, key_id=seeded["keys"]["t02"].id, since=started)
                       if (r.fmt, r.status) == ("json", 200)]
            if records:
                break
            time.sleep(0.1)
        assert records, "not written within 3 s"
    download = records[0]
    assert (download.tenant, download.what, download.period, download.fmt, download.bytes) == (
        "t02", "/v1/usage", PERIOD, "json", len(got.content))
    assert download.client == "testclient" and download.reason == ""
    refusals = access_log(db, key_id=revoked.id, since=started)
    assert [(r.status, r.reason, r.what, r.tenant) for r in refusals] == [(401, "revoked", "/v1/invoices", "")]


def test_refused_requests_record_what_they_asked(world):
    """Issue 36: `key audit` showed a refused download with empty period and format. A refusal's
    record keeps what was asked (unprintable characters as ?, cut to 16 with …); a served download
    keeps what was served (the default format too)."""
    db, seeded = world
    started = datetime.now(UTC).replace(microsecond=0)
    key, token = create_key(db, tenant="t01", label="audited here")
    revoked, revoked_token = create_key(db, tenant="t01", label="revoked, audited here")
    revoke_key(db, revoked.id)
    with make_client(db) as http:
        answers = [
            http.get(f"/v1/usage?period={PERIOD}&format=pdf", headers=bearer(revoked_token)).status_code,
            http.get("/v1/usage?period=2026-13&format=xlsx", headers=bearer(token)).status_code,
            http.get("/v1/usage", params={"period": PERIOD, "format": "\x1b[31m" + "x" * 30}, headers=bearer(token)).status_code,
            http.get(f"/v1/usage?period={PERIOD}", headers=bearer(token)).status_code,
        ]
        assert answers == [401, 400, 400, 200]
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            records = access_log(db, key_id=key.id, since=started) + access_log(db, key_id=revoked.id, since=started)
            if len(records) == 4:
                break
            time.sleep(0.1)
    asked = sorted((r.status, r.period, r.fmt) for r in records)
    # by hand: "\x1b[31m" + 30 × "x" → "?[31m" (5) + 10 × "x" + "…" = 16 characters
    assert asked == [(200, PERIOD, "csv"), (400, PERIOD, "?[31m" + "x" * 10 + "…"), (400, "2026-13", "xlsx"),
                     (401, PERIOD, "pdf")]
