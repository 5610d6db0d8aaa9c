"""The customer web page in a real browser: Debian's headless Chromium (selenium and
chromedriver) against the real app (tenant_api.app.create_app, the real Service) served by
uvicorn on a socket, over an embedded ClickHouse holding rated seconds and a real invoice.
It signs in, reads the month-to-date summary, switches the chart's month, sees February's
invoice voided and replaced and a credit note on the replacement (issue 24), downloads the
voided invoice's, the replacement's and the credit note's PDFs and a usage CSV, and signs out —
in English and in Simplified Chinese.

Screenshots are kept under $GPUBILL_TEST_ARTIFACTS/web/ (default tests/artifacts/web/,
git-ignored), one per step and language, plus the page at a phone's width.

Data (rules: tests/e2e/rules; tests/unit/test_archive.py's cards GA1 acme and GR1 beta):
every day d of February and of March 1–19, 2026, each card runs (d mod 5 + 1) × 120 s from
02:00 UTC (10:00 in the billing time zone, Asia/Shanghai, so the same day). February is
invoiced; the service's clock is 2026-03-20T04:00Z, so March is the month to date.

February's invoice (issued 2026-03-05) is voided on 03-06 ("wrong customer"); the run of 03-07
issues its replacement, naming it; on 03-08 a goodwill credit note takes ¥5.00 off the
replacement's first line: VAT 5.00 × 6 % = 0.30, so the note returns ¥5.30.

    acme, March 1–19: Σ (d mod 5 + 1) × 120 s = 120 × (2+3+4+5+1 ×3 + 2+3+4+5) = 120 × 59 = 7,080 s
        rent: ¥3600/h = ¥1/s → ¥7,080.00;   GPU-hours 7,080 / 3,600 = 1.966… → "1.97"
        electricity: 7,080 s × 1,000,000 mJ × 1.12 × ¥330 / 3.6e9 mJ per kWh = ¥726.88 exactly

Payments (issue 38): beta pays ¥100.00 of its February invoice (issued 2026-03-05, due 15 days on:
2026-03-20) by bank transfer on 2026-03-10 (`pay-beta-1`). A second server reads the same
database with its clock at 2026-04-10T04:00Z (12:00 in Asia/Shanghai): beta's invoice is then 21
days past due with total − 100.00 outstanding, partially paid; its statement of March opens at
0.00, adds the invoice, takes the payment off and closes at total − 100.00; this month's (April
1–10) has no entries and opens and closes at that same figure.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from reports.render.format import round_half_up

pytestmark = pytest.mark.e2e

REPO = Path(__file__).parents[2]
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
NOW = datetime(2026, 3, 20, 4, 0, tzinfo=UTC)
LATER = datetime(2026, 4, 10, 4, 0, tzinfo=UTC)  # the second server's clock: 2026-04-10 in the billing time zone
DAY0 = 1_769_911_200  # 2026-02-01T02:00:00Z
FEB_DAYS, MARCH_DAYS = range(1, 29), range(1, 20)
NAMES = {"acme": "北京算力科技有限公司", "beta": "Beta Compute GmbH"}
WORDS = {  # what the page must say, written here and not read from tenant_api/i18n.py
    "en": {"title": "Sign in with your API key", "refused": "This key was not accepted", "summary": "This month so far",
           "estimate": "Estimate — not yet invoiced", "signed_out": "You have signed out.",
           "voided": "Voided", "issued": "Issued", "replaced_by": "replaced by {number}", "replaces": "replaces {number}",
           "voided_due": "Nothing due: voided", "credit_notes": "Credit notes", "goodwill": "Goodwill",
           "noted": "credit notes: {number}"},
    "zh-CN": {"title": "使用 API 密钥登录", "refused": "此密钥未被接受", "summary": "本月至今",
              "estimate": "预估 — 尚未出账单", "signed_out": "您已退出登录。",
              "voided": "已作废", "issued": "已开具", "replaced_by": "已由 {number} 替代", "replaces": "替代 {number}",
              "voided_due": "已作废，无需付款", "credit_notes": "贷项通知单", "goodwill": "善意补偿",
              "noted": "贷项通知单：{number}"},
}


def day_seconds(day_index: int, d: int) -> list[int]:
    start = DAY0 + day_index * 86_400
    return list(range(start, start + (d % 5 + 1) * 120))


def artifacts() -> Path:
    root = Path(os.environ.get("GPUBILL_TEST_ARTIFACTS") or REPO / "tests" / "artifacts")
    path = root / "web"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def portal(tmp_path_factory, session_broker):
    """The real app on a socket over a seeded, invoiced database; yields (url, expected files, keys)."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("the browser test needs Debian's chromium and chromium-driver: run scripts/bootstrap")
    import uvicorn

    from tenant_api.app import create_app
    from tenant_api.reads import Reads
    from tenant_api.records import AccessRecorder
    from tenant_api.service import Service
    from gpubill.config import Settings
    from tenant_api.access_log import record_access
    from tenant_api.keys import create_key
    from decimal import Decimal

    from billing.credit_notes import create_credit_note, void_invoice
    from billing.invoicing import run_period
    from reports.credit_note_document import credit_note_document
    from reports.invoice_document import invoice_document
    from reports.render import render_credit_note, render_invoice, render_usage
    from reports.render.fonts import warm_up
    from billing.tenants import add_tenant
    from reports.usage_report import usage_report
    from tests.unit import test_archive
    from warehouse import writes
    from warehouse.connection import open_database

    directory = tmp_path_factory.mktemp("web")
    patch = pytest.MonkeyPatch()
    patch.setattr(writes, "MARGIN_S", 0)
    patch.setattr(test_archive, "CARDS", {c: v for c, v in test_archive.CARDS.items() if c in ("GA1", "GR1")})
    rules = test_archive.RULES
    database = open_database(f"chdb://{directory / 'clickhouse'}")
    from tests.e2e.books_on import books_on

    seeding = books_on(database, session_broker.emptied().bootstrap)  # the money on the books, as a command's
    seeding.__enter__()
    seconds = [s for i, d in enumerate(FEB_DAYS) for s in day_seconds(i, d)]
    seconds += [s for i, d in enumerate(MARCH_DAYS) for s in day_seconds(len(FEB_DAYS) + i, d)]
    registered = datetime(2026, 1, 15, tzinfo=UTC)
    for tenant, name in NAMES.items():
        add_tenant(database, tenant, name, now=registered)
    test_archive.seed(database, seconds=seconds)
    run_period(database, rules, "2026-02", now=datetime(2026, 3, 5, tzinfo=UTC))
    number = database.query("SELECT number FROM invoices FINAL WHERE tenant = 'acme' AND period = '2026-02'")[0][0]
    # issue 24: February voided, its replacement issued, a goodwill credit note on the replacement
    void_invoice(database, rules, number, "wrong customer", actor="test", now=datetime(2026, 3, 6, tzinfo=UTC))
    run_period(database, rules, "2026-02", now=datetime(2026, 3, 7, tzinfo=UTC))
    (replacement,) = [n for (n,) in database.query(
        "SELECT number FROM invoices FINAL WHERE tenant = 'acme' AND replaces = {r:String}", {"r": number})]
    goodwill = create_credit_note(database, rules, replacement, "goodwill", {1: Decimal("5.00")}, actor="test",
                                  now=datetime(2026, 3, 8, tzinfo=UTC))
    assert (goodwill.subtotal, goodwill.tax, goodwill.total) == (Decimal("5.00"), Decimal("0.30"), Decimal("5.30"))
    _, acme_key = create_key(database, tenant="acme", label="财务", now=registered)
    # issue 38: beta pays part of its February invoice
    from billing.payments import record_payment

    beta_number, beta_total = database.query(
        "SELECT number, total FROM invoices FINAL WHERE tenant = 'beta' AND period = '2026-02' AND status = 'issued'")[0]
    record_payment(database, rules, "beta", "100.00", "pay-beta-1", "2026-03-10", method="bank", actor="test",
                   now=datetime(2026, 3, 10, 4, 0, tzinfo=UTC))
    _, beta_key = create_key(database, tenant="beta", label="finance", now=registered)
    seeding.__exit__(None, None, None)
    # what the page's downloads must be, byte for byte: the CLI's renderings (built before serving)
    report = usage_report(database, rules, "acme", "2026-02")
    # the font state the app reaches at start (its warm-up thread): a Chinese PDF embeds its glyphs
    # from the warmed "common" face, a process that never warmed up from the full font — the same
    # text, other bytes (reports/render/fonts.py); warmed here first, both are rendered alike
    warm_up()
    # what the page serves: the whole document of that number (the voided one is itself, not its replacement)
    voided, replacing = (invoice_document(database, rules, "acme", number=n) for n in (number, replacement))
    assert (voided.invoice.status, voided.replaced_by, replacing.invoice.replaces) == ("voided", replacement, number)
    note = credit_note_document(database, rules, goodwill.number, tenant="acme")
    expected = {lang: {"pdf": render_invoice(voided, "pdf", lang=lang), "csv": render_usage(report, "csv", lang=lang),
                       "replacement": render_invoice(replacing, "pdf", lang=lang),
                       "credit-note": render_credit_note(note, "pdf", lang=lang)}
                for lang in ("en", "zh-CN")}
    # issue 38: beta's statement of March, as `gpubill statement --format pdf` writes it
    from datetime import date

    from reports.render import render_statement
    from reports.statement import statement_document

    march = statement_document(database, rules, "beta", date(2026, 3, 1), date(2026, 3, 31))
    statement_pdfs = {lang: render_statement(march, "pdf", lang=lang) for lang in ("en", "zh-CN")}

    def serve(now: datetime) -> tuple[Any, threading.Thread, str]:
        """The real app with its clock at `now`, on a socket of its own: (server, its thread, its URL)."""
        reads = Reads([database])
        recorder = AccessRecorder(lambda records: reads.run(lambda db: record_access(db, records)))
        service = Service(reads, lambda: rules, recorder, now=lambda: now)
        app = create_app(Settings(), reads, lambda: rules, service=service)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.05)
        return server, thread, f"http://127.0.0.1:{port}"

    servers = [serve(NOW), serve(LATER)]
    try:
        yield {"url": servers[0][2], "expected": expected, "key": acme_key, "number": number,
               "replacement": replacement, "credit_note": goodwill.number, "database": database,
               "replacement_total": replacing.invoice.total, "later_url": servers[1][2], "beta_key": beta_key,
               "beta_number": beta_number, "beta_total": Decimal(beta_total), "statement_pdfs": statement_pdfs}
    finally:
        for server, thread, _ in servers:
            server.should_exit = True
        for server, thread, _ in servers:
            thread.join(timeout=15)
        database.close()
        patch.undo()


@pytest.fixture
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service as DriverService

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1280,900", f"--user-data-dir={tmp_path / 'profile'}", "--lang=en-US"):
        options.add_argument(argument)
    options.add_experimental_option("prefs", {"download.default_directory": str(downloads),
                                              "download.prompt_for_download": False,
                                              "intl.accept_languages": "en-US,en"})
    driver = webdriver.Chrome(options=options, service=DriverService(CHROMEDRIVER))
    driver.execute_cdp_cmd("Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    driver.downloads = downloads
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver, name: str, *, full: bool = True) -> None:
    """A screenshot of the whole page (the window grown to its height)."""
    if full:
        width = driver.execute_script("return window.innerWidth")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, height + 140)
    driver.save_screenshot(str(artifacts() / f"{name}.png"))
    driver.set_window_size(1280, 900)


def downloaded(driver, name: str, timeout_s: float = 30) -> bytes:
    path = driver.downloads / name
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.is_file() and not (driver.downloads / f"{name}.crdownload").exists():
            time.sleep(0.1)
            return path.read_bytes()
        time.sleep(0.1)
    raise AssertionError(f"{name} was not downloaded; the folder holds {sorted(os.listdir(driver.downloads))}")


def text(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id).text


def fen(value: Fraction) -> str:
    """An exact amount in yuan, rounded half up to the fen and grouped: "7,080.00"."""
    return f"{round_half_up(Decimal(value.numerator) / Decimal(value.denominator), 2):,f}"


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_sign_in_read_download_and_sign_out_in_a_real_browser(portal, browser, lang):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as until
    from selenium.webdriver.support.ui import Select, WebDriverWait

    words, tag = WORDS[lang], lang.lower()
    wait = WebDriverWait(browser, 20)

    # -- the sign-in page, in the language picked with the switcher --------------------------
    browser.get(portal["url"] + "/")
    browser.find_element(By.CSS_SELECTOR, f'a[data-lang="{lang}"]').click()
    wait.until(lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("lang") == lang)
    assert words["title"] in browser.find_element(By.TAG_NAME, "h1").text
    assert not browser.find_element(By.CSS_SELECTOR, "[data-toggle-key]").get_attribute("hidden")  # the script ran
    shot(browser, f"01-sign-in-{tag}")

    # -- a wrong key is refused, saying so ----------------------------------------------------
    browser.find_element(By.ID, "key").send_keys("gpb_k_aaaaaaaaaaaaaaaa_" + "x" * 43)
    browser.find_element(By.ID, "sign-in").click()
    wait.until(until.presence_of_element_located((By.ID, "notice")))
    assert words["refused"] in text(browser, "notice")
    assert browser.get_cookie("gpubill_session") is None
    shot(browser, f"02-refused-{tag}")

    # -- the right key: the summary of the month to date ------------------------------------
    browser.find_element(By.ID, "key").send_keys(portal["key"])
    browser.find_element(By.ID, "sign-in").click()
    wait.until(until.presence_of_element_located((By.ID, "summary")))
    cookie = browser.get_cookie("gpubill_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and portal["key"] not in cookie["value"]
    assert browser.execute_script("return document.cookie") == ""  # nothing the page's script can read
    assert text(browser, "tenant-name") == NAMES["acme"]
    assert words["summary"] in text(browser, "summary-title") and text(browser, "summary-period") == "2026-03"
    assert text(browser, "summary-state") == words["estimate"]
    march_s = sum((d % 5 + 1) * 120 for d in MARCH_DAYS)
    assert march_s == 7_080
    electricity = Fraction(march_s * 1_000_000) * Fraction(112, 100) * 330 / 3_600_000_000
    assert text(browser, "stat-rent") == "¥7,080.00"  # ¥1/s
    assert text(browser, "stat-electricity") == f"¥{fen(electricity)}" == "¥726.88"
    assert text(browser, "stat-gpu-hours") == "1.97"  # 7,080 / 3,600 = 1.9666…
    assert "2026-03-19" in text(browser, "newest-data")
    bars = browser.find_elements(By.CSS_SELECTOR, "#chart-svg .chart__bars rect")
    heights = [float(bar.get_attribute("height")) for bar in bars]
    assert len(bars) == 31 and all(h > 0 for h in heights[:19]) and not any(heights[19:])
    # day 4 ran 5 × 120 s and day 5 1 × 120 s: bars in that proportion (to the pixel's rounding)
    assert heights[3] == pytest.approx(5 * heights[4], abs=0.05)
    # what is owed and what is left (issue 23): the balance, the runway, the credits, each invoice's due
    # acme has no top-ups: postpaid, the page says what it is charged, not a negative prepaid balance (issue 36)
    money_words = {"en": ("Owed (postpaid)", "Credits left", "Nothing due", "by 2026-03-22"),
                   "zh-CN": ("应付（后付费）", "剩余抵扣额度", "无需付款", "2026-03-22 前")}[lang]
    money = text(browser, "money")
    assert money_words[0] in money and money_words[1] in money
    assert text(browser, "balance").startswith("¥") and text(browser, "runway")
    # the replacement (issued 2026-03-07) is due 15 days on, by 2026-03-22
    due = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["replacement"]}"] td.due').text
    assert due == money_words[2] or due.endswith(money_words[3]), due
    # what it asks is its total less the goodwill note's 5.30 (issue 24): a credit note lowers what is due
    assert due.startswith(f"¥{portal['replacement_total'] - Decimal('5.30'):,.2f}"), due
    assert "发票" not in browser.page_source
    periods = [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "chart-period")).options]
    assert periods == ["2026-03", "2026-02"]  # the months with data, not the whole year
    # -- issue 24: the voided invoice marked with its replacement, the credit note listed --------
    voided = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["number"]}"]')
    assert voided.find_element(By.CSS_SELECTOR, "[data-status]").text == words["voided"]
    assert voided.find_element(By.CSS_SELECTOR, '[data-remark="replaced-by"]').text == words["replaced_by"].format(
        number=portal["replacement"])
    assert voided.find_element(By.CSS_SELECTOR, "td.due").text == words["voided_due"]
    struck = voided.find_element(By.CSS_SELECTOR, ".amount").value_of_css_property("text-decoration-line")
    assert struck == "line-through"  # the stylesheet loaded and marks what it no longer asks
    replacing = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["replacement"]}"]')
    assert replacing.find_element(By.CSS_SELECTOR, "[data-status]").text == words["issued"]
    assert replacing.find_element(By.CSS_SELECTOR, '[data-remark="replaces"]').text == words["replaces"].format(
        number=portal["number"])
    assert replacing.find_element(By.CSS_SELECTOR, '[data-remark="credit-notes"]').text == words["noted"].format(
        number=portal["credit_note"])
    assert words["credit_notes"] in text(browser, "credit-notes-title")
    note = browser.find_element(By.CSS_SELECTOR, f'tr[data-credit-note="{portal["credit_note"]}"]')
    cells = [cell.text for cell in note.find_elements(By.TAG_NAME, "td")]
    assert cells[:6] == [portal["credit_note"], portal["replacement"], "2026-02", words["goodwill"], "2026-03-08",
                         "¥5.30"], cells  # 5.00 + VAT 0.30
    shot(browser, f"03-dashboard-{tag}")
    browser.set_window_size(390, 844)
    shot(browser, f"04-dashboard-phone-{tag}")

    # -- February in the chart (the list submits itself), its invoice as a PDF ----------------
    tag = "" if lang == "en" else f".{lang}"  # a PDF's name carries its language (issue 36)
    Select(browser.find_element(By.ID, "chart-period")).select_by_value("2026-02")
    wait.until(lambda d: "period=2026-02" in d.current_url)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart-svg .chart__bars rect")) == 28
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["number"]}"]')
    row.find_element(By.CSS_SELECTOR, 'a[data-format="pdf"]').click()
    pdf = downloaded(browser, f"{portal['number']}_acme_2026-02{tag}.pdf")
    assert pdf.startswith(b"%PDF-") and pdf == portal["expected"][lang]["pdf"]  # the voided invoice itself
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["replacement"]}"]')
    row.find_element(By.CSS_SELECTOR, 'a[data-format="pdf"]').click()
    pdf = downloaded(browser, f"{portal['replacement']}_acme_2026-02{tag}.pdf")
    assert pdf.startswith(b"%PDF-") and pdf == portal["expected"][lang]["replacement"]
    assert pdf != portal["expected"][lang]["pdf"]

    # -- the credit note as a PDF, in the page's language -------------------------------------
    note = browser.find_element(By.CSS_SELECTOR, f'tr[data-credit-note="{portal["credit_note"]}"]')
    note.find_element(By.CSS_SELECTOR, 'a[data-format="pdf"]').click()
    pdf = downloaded(browser, f"{portal['credit_note']}_acme_2026-02{tag}.pdf")
    assert pdf.startswith(b"%PDF-") and pdf == portal["expected"][lang]["credit-note"]

    # -- a usage report of February as CSV, in the page's language ---------------------------
    Select(browser.find_element(By.ID, "usage-period")).select_by_value("2026-02")
    browser.find_element(By.ID, "usage-csv").click()
    csv = downloaded(browser, "usage_acme_2026-02.csv")
    assert csv == portal["expected"][lang]["csv"]
    shot(browser, f"05-february-{tag}")

    # -- sign out: back to the sign-in page, and the session is gone -------------------------
    browser.find_element(By.ID, "sign-out").click()
    wait.until(until.presence_of_element_located((By.ID, "notice")))
    assert text(browser, "notice") == words["signed_out"]
    assert browser.get_cookie("gpubill_session") is None
    browser.get(portal["url"] + "/files/usage?period=2026-02&format=csv")
    wait.until(until.presence_of_element_located((By.ID, "sign-in")))
    shot(browser, f"06-signed-out-{tag}")


PAYMENT_WORDS = {  # what the page must say about payments (issue 38), written here, not read from i18n.py
    "en": {"partly": "Partially paid", "unpaid": "Unpaid", "overdue": "Overdue", "opening": "Opening balance",
           "closing": "Closing balance", "invoice": "Invoice {number}", "payment": "Payment pay-beta-1",
           "bank": "Bank transfer", "nothing": "Nothing between 2026-04-01 and 2026-04-10.",
           "owed": "Owed (postpaid)", "statement": "Statement of account", "payments": "Payments",
           "note": "outstanding on invoices {amount} + not invoiced yet"},
    "zh-CN": {"partly": "部分付款", "unpaid": "未付款", "overdue": "已逾期", "opening": "期初余额",
              "closing": "期末余额", "invoice": "账单 {number}", "payment": "付款 pay-beta-1",
              "bank": "银行转账", "nothing": "2026-04-01 至 2026-04-10 期间无记录。",
              "owed": "应付（后付费）", "statement": "对账单", "payments": "付款记录",
              "note": "账单未付 {amount} + 尚未开账单"},
}


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_paid_outstanding_overdue_and_the_statement_in_a_real_browser(portal, browser, lang):
    """Issue 38: beta's page on 2026-04-10 (the second server's clock) — its February invoice with
    ¥100.00 paid, the rest outstanding and overdue; the statement of this month, then of March chosen
    in the form; the payment listed — in both languages."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as until
    from selenium.webdriver.support.ui import WebDriverWait

    words, tag = PAYMENT_WORDS[lang], lang.lower()
    wait = WebDriverWait(browser, 20)
    number, total = portal["beta_number"], portal["beta_total"]
    left = total - Decimal("100.00")  # what the invoice still asks once ¥100.00 is paid
    assert left > 0

    def yuan(amount: Decimal) -> str:
        return f"\u2212¥{-amount:,.2f}" if amount < 0 else f"¥{amount:,.2f}"

    browser.get(portal["later_url"] + "/")
    browser.find_element(By.CSS_SELECTOR, f'a[data-lang="{lang}"]').click()
    wait.until(lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("lang") == lang)
    browser.find_element(By.ID, "key").send_keys(portal["beta_key"])
    browser.find_element(By.ID, "sign-in").click()
    wait.until(until.presence_of_element_located((By.ID, "statement")))

    # -- the invoice: total, paid, outstanding, partially paid, overdue (due 2026-03-20, now 04-10) ----
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{number}"]')
    assert row.find_element(By.CSS_SELECTOR, ".amount").text == yuan(total)
    assert row.find_element(By.CSS_SELECTOR, "td[data-paid]").text == "¥100.00"
    assert row.find_element(By.CSS_SELECTOR, "td[data-outstanding]").text == yuan(left)
    state = row.find_element(By.CSS_SELECTOR, "[data-payment-state]")
    assert (state.get_attribute("data-payment-state"), state.text) == ("partially_paid", words["partly"])
    overdue = row.find_element(By.CSS_SELECTOR, "[data-overdue]")
    assert overdue.text == words["overdue"] and overdue.is_displayed()
    assert overdue.value_of_css_property("color") != row.find_element(By.CSS_SELECTOR, "[data-status]") \
        .value_of_css_property("color")  # the stylesheet marks it apart from the issued badge
    assert row.find_element(By.CSS_SELECTOR, "td.due").text.startswith(yuan(left))
    # what is owed: what the invoice still asks, and March's usage, not invoiced yet, on top
    assert words["owed"] in text(browser, "money") and text(browser, "outstanding").startswith(yuan(left))
    assert words["note"].format(amount=yuan(left)) in text(browser, "balance-note")

    # -- the statement of this month (April 1–10): nothing moved, it opens and closes at what is owed ---
    assert words["statement"] in text(browser, "statement-title")
    assert words["opening"] in text(browser, "statement") and words["closing"] in text(browser, "statement")
    assert text(browser, "statement-opening") == yuan(left) == text(browser, "statement-closing")
    assert text(browser, "no-entries") == words["nothing"]
    shot(browser, f"07-payments-this-month-{tag}")

    # -- March, chosen in the form: 0.00, + the invoice, − the payment = what is owed -----------------
    for field, day in (("statement-from", "2026-03-01"), ("statement-to", "2026-03-31")):
        browser.execute_script("arguments[0].value = arguments[1]", browser.find_element(By.ID, field), day)
    browser.find_element(By.ID, "statement-show").click()
    wait.until(lambda d: "from=2026-03-01" in d.current_url and "to=2026-03-31" in d.current_url)
    assert text(browser, "statement-opening") == "¥0.00"
    entries = [[cell.text for cell in tr.find_elements(By.TAG_NAME, "td")]
               for tr in browser.find_elements(By.CSS_SELECTOR, "#statement-entries tbody tr")]
    assert entries == [["2026-03-05", words["invoice"].format(number=number), yuan(total), yuan(total)],
                       ["2026-03-10", words["payment"], yuan(Decimal("-100.00")), yuan(left)]], entries
    assert text(browser, "statement-closing") == yuan(left)
    # its PDF, in the page's language, for the range shown
    browser.find_element(By.CSS_SELECTOR, '#statement a[data-format="pdf"]').click()
    pdf = downloaded(browser, f"statement_beta_2026-03-01_2026-03-31{'' if lang == 'en' else '.' + lang}.pdf")
    assert pdf.startswith(b"%PDF-") and pdf == portal["statement_pdfs"][lang]

    # -- the payment: when, how, how much, where it went ---------------------------------------------
    assert words["payments"] in text(browser, "payments-title")
    payment = browser.find_element(By.CSS_SELECTOR, 'tr[data-payment="pay-beta-1"]')
    cells = [cell.text for cell in payment.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == ["pay-beta-1", "2026-03-10", words["bank"], "¥100.00"], cells
    assert cells[4] == f"{number} ¥100.00" and cells[5] == "¥0.00", cells
    assert "发票" not in browser.page_source
    shot(browser, f"08-payments-march-{tag}")
    browser.set_window_size(390, 844)
    shot(browser, f"09-payments-phone-{tag}")

    # -- acme on the first server (2026-03-20): its replacement, due 03-22, nothing paid and not late yet —
    # unpaid: its goodwill credit note lowers what it asks by 5.30 but is not a payment (billing_rules.accounts
    # InvoiceState.payment_state); the voided invoice carries no payment state ---
    browser.get(portal["url"] + f"/?lang={lang}")
    browser.find_element(By.ID, "key").send_keys(portal["key"])
    browser.find_element(By.ID, "sign-in").click()
    wait.until(until.presence_of_element_located((By.ID, "statement")))
    replacing = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["replacement"]}"]')
    owed = portal["replacement_total"] - Decimal("5.30")  # its goodwill credit note
    assert replacing.find_element(By.CSS_SELECTOR, "td[data-paid]").text == "¥0.00"
    assert replacing.find_element(By.CSS_SELECTOR, "td[data-outstanding]").text == f"¥{owed:,.2f}"
    assert replacing.find_element(By.CSS_SELECTOR, "[data-payment-state]").text == words["unpaid"]
    assert not replacing.find_elements(By.CSS_SELECTOR, "[data-overdue]")
    voided = browser.find_element(By.CSS_SELECTOR, f'tr[data-invoice="{portal["number"]}"]')
    assert not voided.find_elements(By.CSS_SELECTOR, "[data-payment-state]")
    assert not voided.find_elements(By.CSS_SELECTOR, "[data-overdue]")
    assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-payment]")  # beta's payment is beta's
