"""The web page over a stand-in Service (the same method names and Problem answers as
tenant_api/service.py), through FastAPI's test client: sign-in, the session cookie, CSRF,
sign-out, revoked keys, operators choosing a tenant, both languages, downloads in the
page's language, the security headers, and hostile names. The real Service, database and
browser are tests/e2e/test_web_browser.py's.

The stand-in's figures (month-to-date of acme, 2026-03), as the summary must show them:
    GPU-hours 1234.5 → "1,234.50"; kWh 98.765 → "98.77" (half up); rent ¥1,234.50;
    electricity ¥100.00; credits ¥150.00 shown as a deduction "−¥150.00";
    VAT 6 % of (1,234.50 + 100.00 − 150.00 = 1,184.50) = 71.07; total 1,184.50 + 71.07 = ¥1,255.57
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tenant_api import web
from tenant_api.problems import Problem
from tenant_api.web_session import Sessions


@dataclass(frozen=True)
class Key:
    id: str
    tenant: str
    role: str = "tenant"
    label: str = ""
    expires_at: datetime | None = None


@dataclass(frozen=True)
class Current:
    tenant: str
    period: str
    gpu_hours: Decimal
    kwh: Decimal
    rent: Decimal
    electricity: Decimal
    credits: Decimal
    vat: Decimal
    estimated_total: Decimal
    newest_data_at: datetime | None
    invoiced: bool
    invoice_number: str | None


@dataclass(frozen=True)
class Daily:
    day: str
    gpu_hours: Decimal
    rent: Decimal
    electricity: Decimal
    spend: Decimal


@dataclass(frozen=True)
class File:
    body: bytes
    media_type: str
    filename: str


ACME = Key("k_acme", "acme", label="ci-bot", expires_at=datetime(2027, 1, 31, 23, 59, 59, tzinfo=UTC))
BETA = Key("k_beta", "beta", label="")
OPERATOR = Key("k_op", "", role="operator", label="support desk")
TOKENS = {"gpb_k_acme_secret": ACME, "gpb_k_beta_secret": BETA, "gpb_k_op_secret": OPERATOR}
NAMES = {"acme": "Acme 算力 <Ltd>", "beta": "<script>alert(1)</script>\u202eevil"}
_ISSUED = {"status": "issued", "issued_at": "2026-03-04T08:00:00Z", "currency": "CNY", "issue_date": "2026-03-04",
           "replaces": "", "replaced_by": "", "credit_notes": []}
# acme's February: GB-…01 (a goodwill credit note on it), GB-…03 voided and replaced by GB-…04
# issue 38: GB-…04 paid by pay-acme-1; GB-…01 unpaid and past its due date (the stand-in's today: 2026-03-20)
_UNPAID = {"paid": "0.00", "credited": "0.00", "written_off": "0.00", "payment_state": "unpaid", "overdue": False}
INVOICES = {"acme": [{**_ISSUED, "number": "GB-2026-000004", "period": "2026-02", "issued_at": "2026-03-06T08:00:00Z",
                      "issue_date": "2026-03-06", "total": "480.00", "prepaid": False, "amount_due": "0.00",
                      "due_date": "2026-03-21", "settled": True, "replaces": "GB-2026-000003",
                      **_UNPAID, "paid": "480.00", "outstanding": "0.00", "payment_state": "paid"},
                     {**_ISSUED, "number": "GB-2026-000003", "period": "2026-02", "status": "voided", "total": "530.00",
                      "prepaid": False, "amount_due": "0.00", "due_date": None, "settled": True,
                      "replaced_by": "GB-2026-000004", "credit_notes": ["CN-2026-000002"],
                      **_UNPAID, "credited": "530.00", "outstanding": "0.00", "payment_state": "paid"},
                     {**_ISSUED, "number": "GB-2026-000001", "period": "2026-02", "total": "1000.10", "prepaid": False,
                      "amount_due": "1000.10", "due_date": "2026-03-19", "settled": False,
                      "credit_notes": ["CN-2026-000001"], **_UNPAID, "outstanding": "1000.10", "overdue": True}],
            "beta": [{**_ISSUED, "number": "GB-2026-000002", "period": "2026-02", "total": "7.00", "prepaid": True,
                      "amount_due": "0.00", "due_date": "2026-03-19", "settled": True, "credit_notes": ["CN-2026-000003"],
                      **_UNPAID, "paid": "5.94", "credited": "1.06", "outstanding": "0.00", "payment_state": "paid"}]}
PAYMENTS = {"acme": [{"ref": "pay-acme-1", "amount": "480.00", "currency": "CNY", "method": "bank",
                      "received_on": "2026-03-15", "allocations": [{"invoice": "GB-2026-000004", "amount": "480.00"}],
                      "unapplied": "0.00", "reversed_on": None},
                     {"ref": "pay-acme-0", "amount": "100.00", "currency": "CNY", "method": "alipay",
                      "received_on": "2026-03-12", "allocations": [], "unapplied": "0.00", "reversed_on": "2026-03-13"}]}
TODAY = "2026-03-20"  # the stand-in's today, in the billing time zone
_NOTE = {"period": "2026-02", "currency": "CNY", "issued_at": "2026-03-05T17:00:00Z", "issue_date": "2026-03-06"}
CREDIT_NOTES = {"acme": [{**_NOTE, "number": "CN-2026-000002", "invoice": "GB-2026-000003", "reason": "void",
                          "subtotal": "500.00", "tax": "30.00", "total": "530.00"},
                         {**_NOTE, "number": "CN-2026-000001", "invoice": "GB-2026-000001", "reason": "goodwill",
                          "subtotal": "5.00", "tax": "0.30", "total": "5.30"}],
                "beta": [{**_NOTE, "number": "CN-2026-000003", "invoice": "GB-2026-000002", "reason": "price_error",
                          "subtotal": "1.00", "tax": "0.06", "total": "1.06"}]}
BALANCES = {"acme": (Decimal("-1000.10"), None), "beta": (Decimal("193.00"), Decimal("12.50"))}
PREPAID = {"beta"}  # acme is postpaid: no top-ups


@dataclass
class FakeService:
    """Service's methods over the figures above; `calls` says what the page asked for."""

    revoked: set[str] = field(default_factory=set)
    blocked: dict[str, int] = field(default_factory=dict)  # client → Retry-After seconds
    calls: list[tuple] = field(default_factory=list)

    def authenticate(self, token: str, client: str) -> Key:
        self.calls.append(("authenticate", client))
        if client in self.blocked:
            raise Problem(429, "too many", headers={"Retry-After": str(self.blocked[client])})
        key = TOKENS.get(token)
        if key is None or key.id in self.revoked:
            raise Problem(401, "the API key is not valid")
        return key

    def tenant_for(self, key: Key, requested: str | None) -> str:
        if key.role != "operator":
            if requested is not None:
                raise Problem(400, "tenant: only operator keys choose", param="tenant")
            return key.tenant
        if not requested or not requested.isalnum():
            raise Problem(400, "tenant: not a tenant id", param="tenant")
        return requested

    def me(self, key: Key) -> dict:
        return {"tenant": key.tenant or None, "display_name": NAMES.get(key.tenant, ""), "key_id": key.id,
                "role": key.role, "label": key.label,
                "expires_at": key.expires_at.isoformat().replace("+00:00", "Z") if key.expires_at else None}

    def current(self, key: Key, tenant: str) -> Current:
        self.calls.append(("current", tenant))
        return Current(tenant, "2026-03", Decimal("1234.5"), Decimal("98.765"), Decimal("1234.50"),
                       Decimal("100.00"), Decimal("150.00"), Decimal("71.07"), Decimal("1255.57"),
                       datetime(2026, 3, 10, 8, 30, 5, tzinfo=UTC), False, None)

    def brand(self, lang: str) -> str:
        return "黔云算力" if lang == "zh-CN" else "Qiancloud GPU"

    def balance(self, key: Key, tenant: str):
        from types import SimpleNamespace

        left, runway = BALANCES.get(tenant, (Decimal("0.00"), None))
        prepaid = tenant in PREPAID
        # a postpaid tenant's balance is what it is charged, negative: its invoices and estimates
        return SimpleNamespace(balance=left, runway_hours=runway, prepaid=prepaid,
                               owed=Decimal(0) if prepaid else -left, invoiced=Decimal("1000.10"), estimated=-left - Decimal("1000.10"))

    def credits(self, key: Key, tenant: str) -> list:
        from types import SimpleNamespace

        trial = SimpleNamespace(id="trial", reason="New-user trial credit", remaining=Decimal("2.30"))
        return [(trial, "新用户试用额度")] if tenant == "acme" else []

    def daily(self, key: Key, tenant: str, period: str) -> list[Daily]:
        self.calls.append(("daily", tenant, period))
        return [Daily(f"{period}-01", Decimal("10"), Decimal("10"), Decimal("1"), Decimal("11")),
                Daily(f"{period}-03", Decimal("5"), Decimal("5"), Decimal("0.5"), Decimal("5.5"))]

    def invoices(self, key: Key, tenant: str) -> list[dict]:
        return INVOICES.get(tenant, [])

    def usage_download(self, key, tenant, period, fmt, granularity, lang) -> File:
        self.calls.append(("usage", tenant, period, fmt, granularity, lang))
        if period != "2026-03":
            raise Problem(400, "period: not a month like 2026-03", param="period")
        return File(f"usage {tenant} {period} {fmt} {granularity} {lang}".encode(), "text/csv; charset=utf-8",
                    f"usage_{tenant}_{period}.{fmt}")

    def invoice_download(self, key, tenant, number, fmt, lang) -> File:
        self.calls.append(("invoice", tenant, number, fmt, lang))
        if number not in {i["number"] for i in INVOICES.get(tenant, [])}:
            raise Problem(404, "no such invoice")
        return File(f"invoice {tenant} {number} {fmt} {lang}".encode(), "application/pdf",
                    f"{number}_{tenant}_2026-02.{fmt}")

    def credit_notes(self, key: Key, tenant: str) -> list[dict]:
        return CREDIT_NOTES.get(tenant, [])

    def payments(self, key: Key, tenant: str) -> list[dict]:
        return PAYMENTS.get(tenant, [])

    def account(self, key: Key, tenant: str):
        from types import SimpleNamespace

        # acme: GB-…01's 1,000.10 outstanding and past due; nothing held
        outstanding = sum((Decimal(i["outstanding"]) for i in INVOICES.get(tenant, [])), Decimal("0.00"))
        past_due = sum((Decimal(i["outstanding"]) for i in INVOICES.get(tenant, []) if i["overdue"]), Decimal("0.00"))
        return SimpleNamespace(outstanding=outstanding, past_due=past_due, unapplied=Decimal("0.00"))

    def statement(self, key: Key, tenant: str, start: str | None, end: str | None):
        """acme's account from its invoices and payments above, by billing_rules.accounts.statement; the
        Service's defaults (today, the first of its month) and its refusal of a range that runs backwards."""
        from datetime import date

        from billing_rules.accounts import InvoiceDoc, PaymentDoc, statement

        self.calls.append(("statement", tenant, start, end))
        try:
            end_on = date.fromisoformat(end or TODAY)
            start_on = date.fromisoformat(start) if start else end_on.replace(day=1)
        except ValueError:
            raise Problem(400, "from: not a date", param="from") from None
        if start_on > end_on:
            raise Problem(400, "from: after to", param="from")
        invoices = [InvoiceDoc(i["number"], tenant, i["period"], "issued", date.fromisoformat(i["issue_date"]),
                               date.fromisoformat(i["due_date"]), Decimal(i["total"]))
                    for i in INVOICES.get(tenant, []) if i["status"] == "issued"]
        payments = [PaymentDoc(p["ref"], tenant, Decimal(p["amount"]), date.fromisoformat(p["received_on"]), p["method"],
                               date.fromisoformat(p["reversed_on"]) if p["reversed_on"] else None)
                    for p in PAYMENTS.get(tenant, [])]
        from reports.statement import StatementDocument

        return StatementDocument(statement(tenant, start_on, end_on, invoices=invoices, payments=payments,
                                           credit_notes=[], refunds=[], write_offs=[]))

    def statement_download(self, key, tenant, start, end, fmt, lang) -> File:
        self.calls.append(("statement-file", tenant, start, end, fmt, lang))
        found = self.statement(key, tenant, start, end).statement
        return File(f"statement {tenant} {found.start} {found.end} {fmt} {lang}".encode(), "application/pdf",
                    f"statement_{tenant}_{found.start}_{found.end}.{fmt}")

    def credit_note_download(self, key, tenant, number, fmt, lang) -> File:
        self.calls.append(("credit-note", tenant, number, fmt, lang))
        if number not in {n["number"] for n in CREDIT_NOTES.get(tenant, [])}:
            raise Problem(404, "no such credit note")
        return File(f"credit note {tenant} {number} {fmt} {lang}".encode(), "application/pdf",
                    f"{number}_{tenant}_2026-02.{fmt}")


# -- the harness -----------------------------------------------------------------------------

BASE = "http://portal.test"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Portal:
    client: TestClient
    service: FakeService
    sessions: Sessions
    clock: Clock

    def login_token(self) -> str:
        page = self.client.get("/")
        return re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)

    def sign_in(self, token: str = "gpb_k_acme_secret", **headers: str):
        csrf = self.login_token()
        return self.client.post("/session", data={"key": token, "csrf": csrf},
                                headers={"Origin": BASE, **headers}, follow_redirects=False)

    def csrf(self) -> str:
        return re.search(r'name="csrf" value="([^"]+)"', self.client.get("/").text).group(1)


def make_portal(base: str = BASE, **caps: int) -> Portal:
    app, service, clock = FastAPI(), FakeService(), Clock()
    sessions = Sessions(clock=clock, **caps)
    web.install(app, service, sessions=sessions)
    return Portal(TestClient(app, base_url=base), service, sessions, clock)


@pytest.fixture
def portal() -> Portal:
    return make_portal()


def cookie_header(response, name: str) -> str:
    found = [v for v in response.headers.get_list("set-cookie") if v.startswith(f"{name}=")]
    assert len(found) == 1, response.headers.get_list("set-cookie")
    return found[0]


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


# -- sign-in, the session cookie, sign-out ---------------------------------------------------

def test_signed_out_the_page_is_a_sign_in_form_with_a_login_token_cookie(portal):
    page = portal.client.get("/")
    assert page.status_code == 200 and 'action="/session"' in page.text and 'type="password"' in page.text
    login = cookie_header(page, "gpubill_login").lower()
    assert "httponly" in login and "samesite=strict" in login and "secure" not in login
    assert portal.service.calls == []  # nothing is read before a key is given


def test_a_valid_key_opens_a_session_held_in_an_httponly_strict_cookie(portal):
    done = portal.sign_in()
    assert done.status_code == 303 and done.headers["location"] == "/"
    session = cookie_header(done, "gpubill_session").lower()
    assert "httponly" in session and "samesite=strict" in session and "path=/" in session
    assert "max-age" not in session and "secure" not in session  # a browser-session cookie; http here
    assert "gpb_k_acme_secret" not in session  # the key stays on the server
    assert len(portal.sessions) == 1
    page = portal.client.get("/")
    words = text_of(page.text)
    for shown in ("¥1,255.57", "1,234.50", "98.77", "¥1,234.50", "¥100.00", "\u2212¥150.00", "¥71.07",
                  "2026-03-10 08:30 UTC", "Estimate — not yet invoiced", "GB-2026-000001", "¥1,000.10"):
        assert shown in words, shown
    assert ("current", "acme") in portal.service.calls and ("daily", "acme", "2026-03") in portal.service.calls


def test_behind_a_tls_proxy_the_session_cookie_is_secure(portal):
    done = portal.client.post("/session", data={"key": "gpb_k_acme_secret", "csrf": portal.login_token()},
                              headers={"Origin": "https://portal.test"}, follow_redirects=False)
    assert done.status_code == 303 and "secure" in cookie_header(done, "gpubill_session").lower()


def test_over_https_the_cookies_are_secure_and_hsts_is_sent():
    portal = make_portal("https://portal.test")
    done = portal.client.post("/session", data={"key": "gpb_k_acme_secret", "csrf": portal.login_token()},
                              headers={"Origin": "https://portal.test"}, follow_redirects=False)
    assert done.status_code == 303
    assert "secure" in cookie_header(done, "gpubill_session").lower()
    assert "max-age=31536000" in portal.client.get("/").headers["strict-transport-security"]


@pytest.mark.parametrize("key, status, message", [
    ("gpb_k_nobody_secret", 401, "This key was not accepted"),
    ("   ", 400, "Enter your API key"),
    ("x" * 300, 400, "This key was not accepted"),
])
def test_a_refused_key_opens_nothing_and_says_what_to_do(portal, key, status, message):
    done = portal.sign_in(key)
    assert done.status_code == status and message in done.text
    assert "gpubill_session=" not in done.headers.get("set-cookie", "") and len(portal.sessions) == 0


def test_an_address_slowed_down_is_told_when_to_retry(portal):
    portal.service.blocked["testclient"] = 42
    done = portal.sign_in()
    assert done.status_code == 429 and done.headers["retry-after"] == "42"
    assert "Try again in 42 seconds" in done.text and len(portal.sessions) == 0


def test_sign_in_refuses_forms_from_elsewhere(portal):
    csrf = portal.login_token()
    form = {"key": "gpb_k_acme_secret", "csrf": csrf}
    for headers in ({"Origin": "https://evil.test"}, {"Origin": "null"}, {},
                    {"Referer": "https://evil.test/page"}, {"Origin": BASE + ":8443"}):
        done = portal.client.post("/session", data=form, headers=headers, follow_redirects=False)
        assert done.status_code == 403 and "expired or did not come from this page" in done.text, headers
    for token in ("", "x" * 43, csrf[:-1]):  # the double-submitted token must match the cookie's
        done = portal.client.post("/session", data={**form, "csrf": token}, headers={"Origin": BASE},
                                  follow_redirects=False)
        assert done.status_code == 403
    done = portal.client.post("/session", data=form, headers={"Referer": f"{BASE}/"}, follow_redirects=False)
    assert done.status_code == 303  # no Origin but our own Referer: accepted
    assert portal.service.calls.count(("authenticate", "testclient")) == 1  # refused forms never reach the key check


def test_sign_in_always_opens_a_new_session(portal):
    portal.client.cookies.set("gpubill_session", "planted-by-someone-else", domain="portal.test")
    done = portal.sign_in()
    assert "planted-by-someone-else" not in cookie_header(done, "gpubill_session")
    first = portal.client.cookies.get("gpubill_session")
    token = "t" * 43  # signing in again from a second sign-in form, while signed in
    portal.client.cookies.set("gpubill_login", token, domain="portal.test")
    again = portal.client.post("/session", data={"key": "gpb_k_acme_secret", "csrf": token}, headers={"Origin": BASE},
                               follow_redirects=False)
    assert again.status_code == 303 and portal.client.cookies.get("gpubill_session") != first
    assert len(portal.sessions) == 1  # the session it replaced is ended


def test_a_tenant_signing_in_with_many_keys_never_signs_another_tenant_out(monkeypatch):
    portal = make_portal(max_sessions=30, max_per_key=4, max_per_tenant=12)
    portal.sign_in("gpb_k_beta_secret")
    beta_cookie = portal.client.cookies.get("gpubill_session")
    for n in range(7):
        monkeypatch.setitem(TOKENS, f"gpb_k_acme{n}_secret", Key(f"k_acme{n}", "acme"))
    for n in range(100):
        portal.client.cookies.clear()
        assert portal.sign_in(f"gpb_k_acme{n % 7}_secret").status_code == 303
    assert len(portal.sessions) == 13 and portal.sessions.find(beta_cookie) is not None
    portal.client.cookies.clear()
    portal.client.cookies.set("gpubill_session", beta_cookie)
    page = portal.client.get("/")  # beta is still signed in: its dashboard, not the sign-in form
    assert page.status_code == 200 and 'action="/session"' not in page.text


def test_a_full_session_table_refuses_a_sign_in_saying_so():
    portal = make_portal(max_sessions=1)
    portal.sign_in("gpb_k_beta_secret")
    portal.client.cookies.clear()
    refused = portal.sign_in()
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "300"
    assert "as many people signed in as it keeps" in text_of(refused.text) and len(portal.sessions) == 1


def test_sign_out_needs_the_sessions_token_and_ends_the_session_on_the_server(portal):
    portal.sign_in()
    stolen = portal.client.cookies.get("gpubill_session")
    refused = portal.client.post("/session/end", data={"csrf": "nope"}, headers={"Origin": BASE},
                                 follow_redirects=False)
    assert refused.status_code == 403 and len(portal.sessions) == 1
    refused = portal.client.post("/session/end", data={"csrf": portal.csrf()}, headers={"Origin": "https://evil.test"},
                                 follow_redirects=False)
    assert refused.status_code == 403 and len(portal.sessions) == 1
    done = portal.client.post("/session/end", data={"csrf": portal.csrf()}, headers={"Origin": BASE},
                              follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/?m=signed_out"
    assert "max-age=0" in cookie_header(done, "gpubill_session").lower() and len(portal.sessions) == 0
    replay = TestClient(portal.client.app, base_url=BASE, cookies={"gpubill_session": stolen})
    page = replay.get("/")
    assert 'action="/session"' in page.text and "Acme" not in page.text


def test_a_key_revoked_mid_session_ends_it(portal):
    portal.sign_in()
    portal.service.revoked.add("k_acme")
    page = portal.client.get("/")
    assert page.status_code == 401 and "Your session has ended" in page.text and len(portal.sessions) == 0
    download = portal.client.get("/files/usage?period=2026-03&format=csv", follow_redirects=False)
    assert download.status_code == 303 and download.headers["location"] == "/?m=ended"


def test_an_idle_session_ends_after_thirty_minutes(portal):
    portal.sign_in()
    portal.clock.now += 29 * 60
    assert "Acme" in portal.client.get("/").text  # a request restarts the idle clock
    portal.clock.now += 29 * 60
    assert "Acme" in portal.client.get("/").text
    portal.clock.now += 31 * 60
    assert 'action="/session"' in portal.client.get("/").text and len(portal.sessions) == 0


# -- what the page shows, for whom -----------------------------------------------------------

def test_a_tenant_key_cannot_pick_another_tenant(portal):
    portal.sign_in()
    done = portal.client.post("/tenant", data={"tenant": "beta", "csrf": portal.csrf()}, headers={"Origin": BASE},
                              follow_redirects=False)
    assert done.status_code == 303
    page = portal.client.get("/").text
    assert "GB-2026-000001" in page and "GB-2026-000002" not in page and 'action="/tenant"' not in page
    assert not any(call[1:2] == ("beta",) for call in portal.service.calls)
    other = portal.client.get("/files/invoices/GB-2026-000002?format=pdf")
    assert other.status_code == 404 and "invoice beta" not in other.text and "it is not yours" in other.text
    assert "该项不存在" in portal.client.get("/files/invoices/GB-2026-000002?format=pdf&lang=zh-CN").text
    # beta's credit note reads as one that does not exist: the same page, nothing of beta's
    theirs = portal.client.get("/files/credit-notes/CN-2026-000003?format=pdf")
    nobody = portal.client.get("/files/credit-notes/CN-2026-999999?format=pdf")
    assert (theirs.status_code, theirs.text) == (404, nobody.text) and "CN-2026-000003" not in page


def test_an_operator_chooses_the_tenant_on_the_page(portal):
    portal.sign_in("gpb_k_op_secret")
    page = portal.client.get("/").text
    assert 'action="/tenant"' in page and "Choose a tenant" in page and "¥" not in text_of(page).split("Amounts")[0]
    refused = portal.client.post("/tenant", data={"tenant": "../etc", "csrf": portal.csrf()}, headers={"Origin": BASE})
    assert refused.status_code == 400 and "not a tenant id" in refused.text
    done = portal.client.post("/tenant", data={"tenant": "beta", "csrf": portal.csrf()}, headers={"Origin": BASE},
                              follow_redirects=False)
    assert done.status_code == 303
    page = portal.client.get("/").text
    assert "GB-2026-000002" in page and ("current", "beta") in portal.service.calls
    body = portal.client.get("/files/invoices/GB-2026-000002?format=pdf").content
    assert body == b"invoice beta GB-2026-000002 pdf en"


def test_names_from_outside_are_escaped_and_isolated(portal):
    portal.sign_in("gpb_k_beta_secret")
    page = portal.client.get("/").text
    assert "<script>alert(1)</script>" not in page
    assert "<bdi>&lt;script&gt;alert(1)&lt;/script&gt;\u202eevil</bdi>" in page
    assert "<script" not in page.replace('<script src="/assets/app.js', "")


def test_the_chart_month_can_be_chosen_and_a_bad_one_is_ignored(portal):
    portal.sign_in()
    page = portal.client.get("/?period=2026-02").text
    assert ("daily", "acme", "2026-02") in portal.service.calls and 'value="2026-02" selected' in page
    portal.client.get("/?period=2026-13")
    portal.client.get("/?period=1999-01")  # not one of the months offered
    assert [c[2] for c in portal.service.calls if c[0] == "daily"][-2:] == ["2026-03", "2026-03"]


def test_the_month_pickers_hold_the_months_with_data_only(portal):
    # before: every month of 2026 whatever the data; now the invoiced month and the current one with usage
    portal.sign_in()
    page = portal.client.get("/").text
    assert re.findall(r'<option value="(\d{4}-\d{2})"', page) == ["2026-03", "2026-02"] * 2  # chart and downloads
    assert 'value="2026-01"' not in page


def test_the_chart_opens_on_the_latest_month_with_data(portal, monkeypatch):
    # before: on the current month even when it had no data (an empty chart)
    quiet = FakeService.current

    def no_usage_yet(self, key, tenant):
        figures = quiet(self, key, tenant)
        return type(figures)(**{**figures.__dict__, "period": "2026-04", "newest_data_at": None})

    monkeypatch.setattr(FakeService, "current", no_usage_yet)
    portal.sign_in()
    page = portal.client.get("/").text
    assert [c[2] for c in portal.service.calls if c[0] == "daily"] == ["2026-02"]
    assert 'value="2026-04"' not in page and 'value="2026-02" selected' in page


def test_the_page_shows_what_is_owed_and_what_is_left(portal):
    # before: no balance, no amount due, no remaining credit on the page; the brand "GPU Billing"
    portal.sign_in()
    page = portal.client.get("/?lang=en").text
    assert "Qiancloud GPU" in page and "GPU Billing" not in page
    # issue 36: acme is postpaid; its page said "Prepaid balance −¥1,000.10": now what it is charged
    assert "Prepaid balance" not in page and "Owed (postpaid)" in page
    assert 'data-prepaid="no">¥1,000.10<' in page and "postpaid: invoiced each month" in page
    assert "outstanding on invoices ¥1,000.10 + not invoiced yet ¥0.00" in page  # issue 38: less payments
    assert "New-user trial credit ¥2.30" in page
    assert "¥1,000.10 by 2026-03-19" in page  # amount due and due date of the postpaid invoice
    zh = portal.client.get("/?lang=zh-CN").text
    assert "黔云算力" in zh and "新用户试用额度 ¥2.30" in zh and "¥1,000.10，2026-03-19 前" in zh
    assert "应付（后付费）" in zh and "预付余额" not in zh
    assert "账单" in zh and "发票" not in zh


def test_a_prepaid_invoice_says_it_was_settled_from_the_balance():
    from tenant_api.i18n import Words
    from tenant_api.web_rows import invoice_row

    row = invoice_row(Words("en"), INVOICES["beta"][0])
    assert (row["due"], row["settled"]) == ("Settled from prepaid balance", True)
    assert invoice_row(Words("zh-CN"), INVOICES["beta"][0])["due"] == "已从预付余额扣款"
    assert row["issued"] == "2026-03-04"  # the issue date in the billing zone


def row_of(page: str, attribute: str, number: str) -> str:
    """The text of the table row `<tr data-ATTRIBUTE="NUMBER">`."""
    found = re.search(rf'<tr data-{attribute}="{re.escape(number)}"[^>]*>(.*?)</tr>', page, re.S)
    assert found, (attribute, number)
    return text_of(found.group(1)).strip()


@pytest.mark.parametrize("lang, words", [
    ("en", {"voided": "Voided", "issued": "Issued", "replaced_by": "replaced by GB-2026-000004",
            "replaces": "replaces GB-2026-000003", "nothing_due": "Nothing due: voided",
            "notes": "credit notes: CN-2026-000001", "void_notes": "credit notes: CN-2026-000002"}),
    ("zh-CN", {"voided": "已作废", "issued": "已开具", "replaced_by": "已由 GB-2026-000004 替代",
               "replaces": "替代 GB-2026-000003", "nothing_due": "已作废，无需付款",
               "notes": "贷项通知单：CN-2026-000001", "void_notes": "贷项通知单：CN-2026-000002"}),
])
def test_a_voided_invoice_is_marked_and_names_its_replacement(portal, lang, words):
    # issue 24, item 5: the status of each invoice, what replaced a voided one, what a replacement replaces
    portal.sign_in()
    page = portal.client.get(f"/?lang={lang}").text
    voided = row_of(page, "invoice", "GB-2026-000003")
    assert words["voided"] in voided and words["replaced_by"] in voided and words["void_notes"] in voided
    assert words["nothing_due"] in voided and "¥530.00" in voided  # what it charged, struck through, nothing to pay
    assert re.search(r'<tr data-invoice="GB-2026-000003" class="is-voided">', page)
    replacement = row_of(page, "invoice", "GB-2026-000004")
    assert words["issued"] in replacement and words["replaces"] in replacement and words["voided"] not in replacement
    assert words["notes"] in row_of(page, "invoice", "GB-2026-000001")
    assert "GB-2026-000004" not in row_of(page, "invoice", "GB-2026-000001")  # only the voided one is replaced


@pytest.mark.parametrize("lang, title, goodwill, void", [
    ("en", "Credit notes", "Goodwill", "Invoice voided"), ("zh-CN", "贷项通知单", "善意补偿", "账单作废")])
def test_the_credit_notes_are_listed_with_their_files(portal, lang, title, goodwill, void):
    portal.sign_in()
    page = portal.client.get(f"/?lang={lang}").text
    assert title in text_of(page) and 'id="credit-notes"' in page
    # newest first, as the Service lists them
    assert re.findall(r'<tr data-credit-note="([^"]+)"', page) == ["CN-2026-000002", "CN-2026-000001"]
    row = row_of(page, "credit-note", "CN-2026-000001")
    for shown in ("GB-2026-000001", "2026-02", goodwill, "2026-03-06", "¥5.30", "PDF", "CSV", "JSON"):
        assert shown in row, shown
    assert void in row_of(page, "credit-note", "CN-2026-000002")
    for fmt in ("pdf", "csv", "json"):
        assert f'href="/files/credit-notes/CN-2026-000001?format={fmt}"' in page
    got = portal.client.get("/files/credit-notes/CN-2026-000001?format=pdf")
    assert got.status_code == 200 and got.content == f"credit note acme CN-2026-000001 pdf {lang}".encode()
    assert got.headers["content-disposition"] == 'attachment; filename="CN-2026-000001_acme_2026-02.pdf"'
    assert got.headers["cache-control"] == "no-store" and "script-src 'self'" in got.headers["content-security-policy"]


def test_a_tenant_without_credit_notes_is_told_so(portal):
    portal.sign_in("gpb_k_op_secret")
    portal.client.post("/tenant", data={"tenant": "gamma", "csrf": portal.csrf()}, headers={"Origin": BASE})
    page = portal.client.get("/").text
    assert 'id="no-credit-notes"' in page and "No credit notes." in page and "data-credit-note" not in page
    assert "暂无贷项通知单。" in portal.client.get("/?lang=zh-CN").text


def test_signed_out_a_credit_note_is_not_served(portal):
    answer = portal.client.get("/files/credit-notes/CN-2026-000001?format=pdf", follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/?m=ended"
    assert not any(call[0] == "credit-note" for call in portal.service.calls)


# -- languages ------------------------------------------------------------------------------

def test_the_language_comes_from_the_switcher_then_the_cookie_then_the_browser(portal):
    portal.sign_in()
    assert '<html lang="en">' in portal.client.get("/").text
    chinese = portal.client.get("/", headers={"Accept-Language": "zh-CN,zh;q=0.9,en;q=0.5"}).text
    assert '<html lang="zh-CN">' in chinese and "本月至今" in chinese and "预估 — 尚未出账单" in chinese
    assert "¥1,255.57" in chinese  # amounts are written the same way in both
    switched = portal.client.get("/?lang=zh-CN&period=2026-02")
    assert "gpubill_lang=zh-CN" in cookie_header(switched, "gpubill_lang")
    assert '<html lang="zh-CN">' in portal.client.get("/", headers={"Accept-Language": "en"}).text  # cookie wins
    assert 'href="/?period=2026-02&amp;lang=en"' in switched.text  # the switcher keeps the month


def test_downloads_use_the_pages_language(portal):
    portal.sign_in()
    english = portal.client.get("/files/usage?period=2026-03&format=pdf&granularity=hour")
    assert english.content == b"usage acme 2026-03 pdf hour en"
    portal.client.get("/?lang=zh-CN")
    chinese = portal.client.get("/files/usage?period=2026-03&format=csv")
    assert chinese.content == b"usage acme 2026-03 csv day zh-CN"
    assert chinese.headers["content-disposition"] == 'attachment; filename="usage_acme_2026-03.csv"'
    assert chinese.headers["cache-control"] == "no-store"
    invoice = portal.client.get("/files/invoices/GB-2026-000001?format=pdf")
    assert invoice.content == b"invoice acme GB-2026-000001 pdf zh-CN"


def test_a_refused_download_is_a_page_saying_why(portal):
    portal.sign_in()
    bad = portal.client.get("/files/usage?period=2026-02&format=csv")
    assert bad.status_code == 400 and "text/html" in bad.headers["content-type"] and "period:" in bad.text
    signed_out = TestClient(portal.client.app, base_url=BASE).get("/files/usage?period=2026-03&format=csv",
                                                                   follow_redirects=False)
    assert signed_out.status_code == 303 and signed_out.headers["location"] == "/?m=ended"


# -- headers and what the page loads ---------------------------------------------------------

def test_every_page_response_carries_the_security_headers(portal):
    responses = [portal.client.get("/"), portal.sign_in(), portal.client.get("/"),
                 portal.client.get("/files/usage?period=2026-03&format=csv"), portal.client.get("/assets/app.css"),
                 portal.client.get("/assets/nope.css")]
    for response in responses:
        csp = response.headers["content-security-policy"]
        assert "unsafe-inline" not in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "same-origin"  # no-referrer would make our own posts Origin: null


def test_the_page_loads_nothing_from_the_network_and_nothing_inline(portal):
    portal.sign_in()
    pages = [portal.client.get("/").text, portal.client.get("/?lang=zh-CN").text, TestClient(
        portal.client.app, base_url=BASE).get("/").text]
    for page in pages:
        for url in re.findall(r'(?:src|href|action)="([^"]*)"', page):
            assert url.startswith(("/", "#")) and not url.startswith("//"), url
        assert not re.search(r"<script(?![^>]*\bsrc=)", page) and " style=" not in page and " on" not in re.sub(
            r">[^<]*<", "><", page).replace(' one', '')
    assets = [portal.client.get(f"/assets/{name}") for name in ("app.css", "app.js", "logo.svg")]
    for asset in assets:
        assert asset.status_code == 200 and "immutable" in asset.headers["cache-control"]
        body = asset.text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "http:" not in body and "https:" not in body and "@import" not in body and "url(" not in body
    assert portal.client.get("/assets/..%2Fweb.py").status_code == 404


def test_a_prepaid_tenant_keeps_its_balance_and_runway(portal):
    portal.sign_in("gpb_k_beta_secret")
    page = portal.client.get("/?lang=en").text
    assert "Prepaid balance" in page and 'data-prepaid="yes">¥193.00<' in page and "Owed" not in page
    assert "12.50 h at the last hour" in page


@pytest.mark.parametrize("lang, words", [
    ("en", {"paid": "Paid", "unpaid": "Unpaid", "overdue": "Overdue", "reversed": "Reversed 2026-03-13",
            "alipay": "Alipay", "none": "No payments recorded yet.", "past_due": "of which overdue ¥1,000.10"}),
    ("zh-CN", {"paid": "已付清", "unpaid": "未付款", "overdue": "已逾期", "reversed": "已于 2026-03-13 冲正",
               "alipay": "支付宝", "none": "暂无付款记录。", "past_due": "其中逾期 ¥1,000.10"}),
])
def test_each_invoice_shows_its_payment_state_and_the_payments_are_listed(portal, lang, words):
    # issue 38: paid and outstanding per invoice, a badge of its state, overdue marked; a voided one gets none
    portal.sign_in()
    page = portal.client.get(f"/?lang={lang}").text
    late = row_of(page, "invoice", "GB-2026-000001")
    assert "¥0.00" in late and "¥1,000.10" in late and words["unpaid"] in late and words["overdue"] in late
    paid = row_of(page, "invoice", "GB-2026-000004")
    assert "¥480.00" in paid and words["paid"] in paid and words["overdue"] not in paid
    voided = re.search(r'<tr data-invoice="GB-2026-000003".*?</tr>', page, re.S).group(0)
    assert "data-payment-state" not in voided and "data-overdue" not in voided
    assert words["past_due"] in text_of(page)
    assert re.findall(r'<tr data-payment="([^"]+)"', page) == ["pay-acme-1", "pay-acme-0"]
    assert words["reversed"] in row_of(page, "payment", "pay-acme-0") and words["alipay"] in row_of(
        page, "payment", "pay-acme-0")
    beta = Portal(TestClient(portal.client.app, base_url=BASE), portal.service, portal.sessions, portal.clock)
    beta.sign_in("gpb_k_beta_secret")
    assert words["none"] in beta.client.get(f"/?lang={lang}").text


def test_the_statement_defaults_to_this_month_and_takes_a_range(portal):
    portal.sign_in()
    page = portal.client.get("/").text
    # the stand-in's today is 2026-03-20: March 1 … 20; before it nothing, then the invoices and payments
    assert ("statement", "acme", None, None) in portal.service.calls
    assert 'name="from" value="2026-03-01"' in page and 'name="to" value="2026-03-20"' in page
    assert re.findall(r'<tr data-entry="([a-z_]+)"', page) == ["invoice", "invoice", "payment", "payment_reversed",
                                                               "payment"]
    # 1,000.10 + 480.00 − 100.00 + 100.00 − 480.00 = 1,000.10
    assert 'id="statement-opening">¥0.00<' in page and 'id="statement-closing">¥1,000.10<' in page
    later = portal.client.get("/?from=2026-03-14&to=2026-03-31&lang=zh-CN").text
    # opening: 1,000.10 + 480.00 − 100.00 + 100.00 = 1,480.10 before the 14th; then pay-acme-1's −480.00
    assert 'id="statement-opening">¥1,480.10<' in later and 'id="statement-closing">¥1,000.10<' in later
    assert "付款 pay-acme-1" in text_of(later) and "−¥480.00" in later
    # the language switcher keeps the range
    assert 'href="/?from=2026-03-14&amp;to=2026-03-31&amp;lang=en"' in later
    # its files, in the page's language, for the range shown
    assert 'href="/files/statement?from=2026-03-14&amp;to=2026-03-31&amp;format=pdf"' in later
    got = portal.client.get("/files/statement?from=2026-03-14&to=2026-03-31&format=pdf")
    assert got.content == b"statement acme 2026-03-14 2026-03-31 pdf zh-CN"
    assert got.headers["content-disposition"] == 'attachment; filename="statement_acme_2026-03-14_2026-03-31.pdf"'
    empty = portal.client.get("/?from=2026-03-21&to=2026-03-31&lang=en").text
    assert "Nothing between 2026-03-21 and 2026-03-31." in empty and "data-entry" not in empty
