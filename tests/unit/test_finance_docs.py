"""docs/finance.md is true: every view is documented with every column, and its sixteen
queries run as the `finance` user through the gateway over a real (embedded) ClickHouse and
answer what finance would work out by hand.

The data is tests/unit/test_archive.py's March 2026 (rules: tests/e2e/rules), invoiced, then
one late minute of acme's March arrives and April is invoiced with it as an adjustment:

    acme  A800-80G hourly  ¥3600/h = ¥1/s   300 s in March → rent ¥300.00
          1000 W, tariff ¥330/kWh × PUE 1.12: 300 s × 1,000,000 mJ = 300,000,000 mJ
          → 300,000,000 × 1.12 × 330 / 3,600,000,000 = ¥30.80
    beta  RTX4090 monthly  ¥1/s, 10 % off    300 s → rent ¥300.00, discount −¥30.00
          400.5 W: 120,150,000 mJ × 1.12 × 330 / 3.6e9 = ¥12.3354 → ¥12.34
    GA2   not rented, 300 W: 90,000,000 mJ = 0.025 kWh idle, × 1.12 × 330 → ¥9.24
    late: acme, 60 s of 2026-03-10 → rent ¥60.00 + 60,000,000 mJ × 1.12 × 330 / 3.6e9 = ¥6.16

The invoices (VAT 6 %; acme is not registered, so no trial credit; its onboarding credit,
¥150, is spendable on March only; beta has none):

    GB-2026-000001 acme March  330.80 − 150.00 credit = 180.80 net, VAT 10.848 → 10.85, total 191.65
    GB-2026-000002 beta March  312.34 − 30.00 discount = 282.34 net, VAT 16.9404 → 16.94, total 299.28
    GB-2026-000003 acme April  60.00 + 6.16 + the late 66.16 = 132.32, VAT 7.9392 → 7.94, total 140.26
    GB-2026-000004 beta April  60 s: 60.00 − 6.00 + 2.47 (24,030,000 mJ) = 56.47, VAT 3.3882 → 3.39, total 59.86

Then the lifecycle (issue 24):

    CN-2026-000001 goodwill on GB-2026-000001, line 1 (the rent): 5.00 + VAT 0.30 = 5.30
    GB-2026-000002 voided: CN-2026-000002 (void) credits rent 300.00 + electricity 12.34 and
        takes back the discount −30.00: 282.34 + VAT 16.94 = 299.28, all of it
    GB-2026-000005 beta March, the replacement (replaces GB-2026-000002): the same 299.28
    a draft for beta's May (review = "manual"): 60 s, the same figures as April, 59.86

so March's revenue is 191.65 + 299.28 + 299.28 − 5.30 − 299.28 = 485.63, the draft counts for nothing.

Then receivables (issue 38; payment terms 15 days, billing time zone Asia/Shanghai). The March
invoices were issued on 2026-04-10 (due 04-25), the April ones on 05-10 (due 05-25), the
replacement on 05-13 (due 05-28); GB-2026-000001's terms row is removed, as for an invoice
issued before migration 0027 (its dates then come from its issue time: the same 04-10 and 04-25).
acme and beta are registered after the invoices (so nothing above changes), then:

    acme-1  ¥100.00 from acme received 05-20 → GB-…01 (the oldest due): 191.65 − 5.30 − 100.00 = 86.35 left
    beta-1  ¥400.00 from beta received 06-01 → GB-…04 59.86 (due 05-25), GB-…05 299.28 (due 05-28);
            40.86 held as credit (GB-…02 was settled by its void note)
    beta-2  ¥10.00 from beta received 06-02, held (nothing outstanding), reversed (bounced) on 07-05
    GB-…03 (acme April, 140.26) written off on 07-05
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from billing.accounts import receivables
from billing.credit_notes import create_credit_note, void_invoice
from billing.invoicing import run_period
from billing.payments import record_payment, reverse_payment, write_off
from billing.tenants import add_tenant
from billing_rules import load_rules
from tests.chdb_template import migrated_dsn
from tests.rules_copies import manual_review_rules
from tests.unit.test_archive import CARDS, MID, NOW, PERIOD, RULES, seed
from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway
from warehouse import writes
from warehouse.connection import open_database
from warehouse.errors import DatabaseError

DOC = Path(__file__).parents[2] / "docs" / "finance.md"
TEXT = DOC.read_text(encoding="utf-8")
LATE_SECONDS = list(range(MID + 100, MID + 160))  # 60 s of 2026-03-10, not in the seed
MAY_LO = RULES.period_bounds("2026-05")[0]
MAY_SECONDS = list(range(MAY_LO, MAY_LO + 60))  # beta's first minute of May: a draft under review


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)


def views(db) -> dict[str, list[str]]:
    names = [n for (n,) in db.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'View' ORDER BY name")]
    return {name: [c for (c,) in db.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String} ORDER BY position",
        {"t": name})] for name in names}


def section_of(view: str) -> str:
    """The text of the doc's `### …` section whose heading names `view`."""
    match = re.search(rf"^### [^\n]*\b{view}\b[^\n]*\n(.*?)(?=^## |^### |\Z)", TEXT, re.MULTILINE | re.DOTALL)
    assert match, f"docs/finance.md has no section for {view}"
    return match.group(1)


def queries() -> list[str]:
    part = TEXT[TEXT.index("## Sixteen queries"):]
    return re.findall(r"```sql\n(.*?)```", part, re.DOTALL)


def test_every_view_is_documented_with_every_column(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as db:
        found = views(db)
    assert len(found) >= 9
    for view, columns in found.items():
        section = section_of(view)
        missing = [c for c in columns if f"`{c}`" not in section]
        assert not missing, f"docs/finance.md, section {view}: columns not documented: {missing}"
    documented = set(re.findall(r"^### (v_\w+)", TEXT, re.MULTILINE)) | set(re.findall(r"`(v_\w+)`:", TEXT))
    assert documented <= set(found), f"documented views that do not exist: {documented - set(found)}"


def test_the_sixteen_queries_read_views_only():
    found = queries()
    assert len(found) == 16
    for sql in found:
        sources = re.findall(r"\b(?:FROM|JOIN)\s+([A-Za-z_][\w.]*)", sql)
        assert sources and all(s.startswith("v_") for s in sources if s != "(SELECT"), sql


def manual_rules(directory: Path):
    """The test rules with `review = "manual"` in billing.toml."""
    rules = load_rules(manual_review_rules(directory))
    assert rules.review == "manual" and RULES.review == "auto"
    return rules


@pytest.fixture(scope="module")
def billed_gateway(tmp_path_factory):
    """March invoiced, then a late minute of acme's March, then April invoiced; a goodwill
    credit note on acme's March, beta's March voided and replaced, a draft of beta's May
    under manual review; then the database served by the gateway (the JDBC driver's test,
    tests/e2e/test_jdbc_gateway.py, reads it too)."""
    directory = tmp_path_factory.mktemp("finance")
    patch = pytest.MonkeyPatch()
    patch.setattr(writes, "MARGIN_S", 0)
    with open_database(f"chdb://{directory / 'clickhouse'}") as db:
        seed(db)
        run_period(db, RULES, PERIOD, now=NOW)
        late = dict(CARDS)
        late.pop("GR1"), late.pop("GA2")
        patch.setattr("tests.unit.test_archive.CARDS", late)
        seed(db, seconds=LATE_SECONDS, version=2)
        run_period(db, RULES, "2026-04", now=datetime(2026, 5, 10, tzinfo=UTC))
        # the lifecycle: a goodwill note, a void and its replacement, a draft
        note = create_credit_note(db, RULES, "GB-2026-000001", "goodwill", {1: Decimal("5.00")}, actor="test",
                                  now=datetime(2026, 5, 12, tzinfo=UTC))
        assert (note.number, note.total) == ("CN-2026-000001", Decimal("5.30"))
        voided, void_note = void_invoice(db, RULES, "GB-2026-000002", "billed on the wrong contract", actor="test",
                                         now=datetime(2026, 5, 12, 1, tzinfo=UTC))
        assert voided.status == "voided" and void_note.number == "CN-2026-000002"
        assert run_period(db, RULES, PERIOD, now=datetime(2026, 5, 13, tzinfo=UTC)).created == ["GB-2026-000005"]
        patch.setattr("tests.unit.test_archive.CARDS", {"GR1": CARDS["GR1"]})
        seed(db, seconds=MAY_SECONDS)
        report = run_period(db, manual_rules(directory / "rules"), "2026-05", now=datetime(2026, 6, 10, tzinfo=UTC))
        assert len(report.drafted) == 1 and report.created == []
        # receivables (issue 38): one invoice as if issued before its terms were kept, payments, a write-off
        db.command("DELETE FROM invoice_terms WHERE number = 'GB-2026-000001'")
        for tenant in ("acme", "beta"):
            add_tenant(db, tenant, tenant.title(), now=datetime(2026, 7, 1, tzinfo=UTC))
        recorded = datetime(2026, 7, 5, 2, tzinfo=UTC)
        record_payment(db, RULES, "acme", "100.00", "acme-1", "2026-05-20", now=recorded)
        record_payment(db, RULES, "beta", "400.00", "beta-1", "2026-06-01", now=recorded)
        record_payment(db, RULES, "beta", "10.00", "beta-2", "2026-06-02", now=recorded)
        reverse_payment(db, RULES, "beta-2", "bounced", now=recorded)
        assert write_off(db, RULES, "GB-2026-000003", "customer gone", now=recorded) == Decimal("140.26")
    patch.undo()
    gateway = start_gateway(directory, free_port())
    try:
        yield gateway
    finally:
        stop_gateway(gateway)


@pytest.fixture(scope="module")
def billed(billed_gateway):
    """The billed database as `finance` through the gateway: every query below runs so."""
    with open_database(billed_gateway.finance_dsn, migrate=False) as finance:
        yield finance


def run(db, number: int) -> list[dict]:
    return db.query_dicts(queries()[number - 1])


def test_queries_answer_what_finance_works_out_by_hand(billed):
    db = billed
    by_month = {r["period"]: r for r in run(db, 1)}
    assert set(by_month) == {PERIOD, "2026-04"}  # May has a draft only: no revenue
    assert (by_month[PERIOD]["invoices"], by_month[PERIOD]["voided"]) == (2, 1)
    assert by_month[PERIOD]["invoiced"] == Decimal("790.21")  # 191.65 + 299.28 voided + 299.28 replacement
    assert by_month[PERIOD]["credited"] == Decimal("304.58")  # 5.30 goodwill + 299.28 void
    assert by_month[PERIOD]["net"] == Decimal("458.14")  # 180.80 + 282.34 + 282.34 − 5.00 − 282.34
    assert by_month[PERIOD]["tax"] == Decimal("27.49")  # 10.85 + 16.94 + 16.94 − 0.30 − 16.94
    assert by_month[PERIOD]["total"] == Decimal("485.63")  # 191.65 − 5.30 + 299.28
    april = by_month["2026-04"]
    assert (april["invoices"], april["voided"], april["credited"], april["total"]) == (
        2, 0, Decimal("0.00"), Decimal("200.12"))  # 140.26 + 59.86

    march = {r["number"]: r for r in run(db, 2)}
    assert {n: (r["tenant"], r["status"], r["replaces"]) for n, r in march.items()} == {
        "GB-2026-000001": ("acme", "issued", ""), "GB-2026-000002": ("beta", "voided", ""),
        "GB-2026-000005": ("beta", "issued", "GB-2026-000002")}
    assert by_month[PERIOD]["total"] == sum(r["revenue"] for r in march.values())
    assert march["GB-2026-000001"]["subtotal"] == Decimal("330.80")  # rent 300.00 + electricity 30.80
    assert (march["GB-2026-000001"]["credited"], march["GB-2026-000001"]["revenue"]) == (
        Decimal("5.30"), Decimal("186.35"))  # 191.65 − 5.30
    assert march["GB-2026-000002"]["revenue"] == Decimal("0.00")  # the voided invoice, all credited
    assert march["GB-2026-000005"]["subtotal"] == Decimal("312.34")  # 300.00 + 12.34 (the discount comes after)
    assert march["GB-2026-000005"]["revenue"] == Decimal("299.28")

    rent = {(r["gpu_model"], r["plan"]): r for r in run(db, 3)}
    assert rent[("A800-80G", "hourly")]["rent"] == Decimal("300.00")
    assert rent[("A800-80G", "hourly")]["credited"] == Decimal("5.00")  # the goodwill note's line
    assert rent[("A800-80G", "hourly")]["rent_net"] == Decimal("295.00")
    assert rent[("RTX4090", "monthly")]["discount"] == Decimal("-30.00")  # the replacement's; the voided one's cancels
    assert rent[("RTX4090", "monthly")]["rent_net"] == Decimal("270.00")

    live = {(r["site"], r["gpu_model"]): r for r in run(db, 4)}
    assert live[("gz-guian", "A800-80G")]["rented_seconds"] == 360  # 300 + the late 60
    assert live[("gz-guian", "A800-80G")]["rent_net"] == Decimal("360.00")
    assert live[("gz-guian", "A800-80G")]["electricity_billed"] == Decimal("36.96")  # 30.80 + 6.16
    assert live[("gz-guian", "RTX4090")]["electricity_billed"] == Decimal("12.34")

    (share,) = run(db, 5)
    assert share["rent_net"] == Decimal("630.00") and share["electricity_billed"] == Decimal("49.30")
    assert share["electricity_share"] == Decimal("0.078247")  # exact sums: (30.80 + 6.16 + 12.3354) / 630 = 0.0782467…


def test_idle_credit_and_late_queries(billed):
    db = billed
    (idle,) = run(db, 6)
    assert idle["site"] == "gz-guian" and idle["idle_kwh"] == Decimal("0.025") and idle["idle_cost"] == Decimal("9.24")

    invoices = {(r["tenant"], r["period"]): r["credit_used"]
                for r in db.query_dicts("SELECT * FROM v_invoices WHERE status = 'issued'")}
    spent: dict[str, Decimal] = {}
    for row in run(db, 7):
        spent[row["tenant"]] = spent.get(row["tenant"], Decimal(0)) + row["credit_spent"]
    for tenant in ("acme", "beta"):
        assert spent.get(tenant, Decimal(0)) == sum(v for (t, _), v in invoices.items() if t == tenant)
    assert spent["acme"] >= Decimal("150.00")  # acme's onboarding credit, spendable on March only, is used

    late = [r for r in run(db, 8) if r["tenant"] == "acme"]
    assert {(r["charged_in"], r["belongs_to"]) for r in late} == {("2026-04", PERIOD)}
    assert sum(r["amount"] for r in late) == Decimal("66.16")  # 60.00 rent + 6.16 electricity

    days = {(r["tenant"], str(r["day"])): r for r in run(db, 9)}
    assert days[("acme", "2026-03-01")]["gpu_hours"] == Decimal("0.033333")  # 120 s
    assert days[("acme", "2026-03-10")]["gpu_hours"] == Decimal("0.033333")  # 60 s + the late 60 s
    assert days[("beta", "2026-03-31")]["avg_util_pct"] == Decimal("90.5")

    gaps = {r["tenant"]: r["difference"] for r in run(db, 10)}
    assert gaps == {"acme": Decimal("-60.00"), "beta": Decimal("0.00")}  # acme's late minute is April's adjustment


def test_credit_note_void_and_draft_queries(billed):
    db = billed
    notes = [(r["period"], r["reason"], r["issued_in"], r["notes"], list(r["numbers"]), r["credited_net"],
              r["tax_reversed"], r["credited"]) for r in run(db, 11)]
    assert notes == [
        (PERIOD, "goodwill", "2026-05", 1, ["CN-2026-000001"], Decimal("5.00"), Decimal("0.30"), Decimal("5.30")),
        (PERIOD, "void", "2026-05", 1, ["CN-2026-000002"], Decimal("282.34"), Decimal("16.94"), Decimal("299.28")),
    ]

    (void,) = run(db, 12)
    assert (void["voided"], void["tenant"], void["period"], void["voided_total"]) == (
        "GB-2026-000002", "beta", PERIOD, Decimal("299.28"))
    assert (list(void["credit_notes"]), void["credited"]) == (["CN-2026-000002"], Decimal("299.28"))  # all of it
    assert (void["replacement"], void["replacement_status"], void["replacement_total"]) == (
        "GB-2026-000005", "issued", Decimal("299.28"))

    (draft,) = run(db, 13)
    assert (draft["period"], draft["tenant"], draft["revision"], draft["replaces"]) == ("2026-05", "beta", 1, "")
    assert re.fullmatch(r"DRAFT-[0-9A-F]{12}", draft["id"])
    # 60 s × ¥1 = 60.00, discount −6.00, 24,030,000 mJ × 1.12 × 330 / 3.6e9 = 2.4671 → 2.47
    assert (draft["subtotal"], draft["net"], draft["tax"], draft["total"]) == (
        Decimal("62.47"), Decimal("56.47"), Decimal("3.39"), Decimal("59.86"))  # VAT 3.3882 → 3.39
    # the lines of a voided invoice and its void credit note cancel out line by line
    voided_lines = {r["line_no"]: r["amount"] for r in db.query_dicts(
        "SELECT line_no, amount FROM v_invoice_lines WHERE number = 'GB-2026-000002' AND status = 'voided'")}
    credited = {r["invoice_line_no"]: r["amount"] for r in db.query_dicts(
        "SELECT invoice_line_no, amount FROM v_credit_note_lines WHERE number = 'CN-2026-000002'")}
    assert voided_lines == credited == {1: Decimal("300.00"), 2: Decimal("12.34"), 3: Decimal("-30.00")}
    actions = [r["action"] for r in db.query_dicts(
        "SELECT action FROM v_invoice_journal WHERE invoice = 'GB-2026-000002' ORDER BY at")]
    assert actions == ["issued", "credit_note", "voided", "replaced"]


def test_finance_cannot_write_what_it_reads(billed):
    with pytest.raises(DatabaseError):
        billed.command("INSERT INTO invoices (number, tenant, period) VALUES ('GB-2026-999999', 'acme', '2026-03')")
    with pytest.raises(DatabaseError):
        billed.command("ALTER TABLE invoice_lines DELETE WHERE 1")
    assert billed.query("SELECT count() FROM v_invoices WHERE status = 'issued'")[0][0] == 4  # acme, beta × March, April
    assert billed.query("SELECT count() FROM v_invoices")[0][0] == 6  # and the voided one, the draft
    with pytest.raises(DatabaseError):
        billed.command("INSERT INTO credit_notes (number, invoice, tenant) VALUES ('CN-2026-999999', 'GB-2026-000001', 'acme')")
    # the API's access records (issue 14): finance reads them, and cannot add or remove one
    assert billed.query("SELECT count() FROM v_api_access")[0][0] == 0  # no API served in this data
    with pytest.raises(DatabaseError):
        billed.command("INSERT INTO api_access_log (key_id, status) VALUES ('k_aaaaaaaaaaaaaaaa', 200)")


def _aging(row: dict) -> tuple[Decimal, ...]:
    return tuple(row[k] for k in ("current", "d1_30", "d31_60", "d61_90", "d90_plus", "outstanding", "unapplied"))


def test_receivables_queries_answer_what_finance_works_out_by_hand(billed, billed_gateway):
    db = billed
    (owing,) = run(db, 14)  # GB-…03 is written off: nothing outstanding; beta has paid everything
    assert (owing["tenant"], owing["number"], owing["period"], owing["issued_on"], owing["due_on"]) == (
        "acme", "GB-2026-000001", PERIOD, date(2026, 4, 10), date(2026, 4, 25))  # from issued_at: no terms row
    assert (owing["total"], owing["paid"], owing["credited"], owing["written_off"], owing["outstanding"]) == (
        Decimal("191.65"), Decimal("100.00"), Decimal("5.30"), Decimal("0.00"), Decimal("86.35"))
    assert owing["payment_state"] == "partially_paid"
    today = datetime.now(UTC).astimezone(RULES.billing_tz).date()
    assert owing["days_past_due"] == (today - date(2026, 4, 25)).days

    # as of 2026-06-30: GB-…01 86.35 at day 66 (5 + 31 + 30) → d61_90; GB-…03 140.26 at day 36 (6 + 30) → d31_60;
    # beta: 400.00 + 10.00 (beta-2, not reversed yet) + 299.28 (its void note) − 59.86 − 299.28 − 299.28 = 50.86 held
    z = Decimal("0.00")
    assert {r["tenant"]: _aging(r) for r in run(db, 15)} == {
        "acme": (z, z, Decimal("140.26"), Decimal("86.35"), z, Decimal("226.61"), z),
        "beta": (z, z, z, z, z, z, Decimal("50.86"))}
    # the same query as of 05-20 (acme-1's day: GB-…01 at day 25; GB-…03 and beta's April and
    # March replacement not yet due; beta-1 not received) and of 07-05 (GB-…03 written off that day)
    sql = queries()[14]
    as_of_may = {r["tenant"]: _aging(r) for r in db.query_dicts(sql.replace("2026-06-30", "2026-05-20"))}
    assert as_of_may == {"acme": (Decimal("140.26"), Decimal("86.35"), z, z, z, Decimal("226.61"), z),
                         "beta": (Decimal("359.14"), z, z, z, z, Decimal("359.14"), z)}  # 59.86 + 299.28
    as_of_july = {r["tenant"]: _aging(r) for r in db.query_dicts(sql.replace("2026-06-30", "2026-07-05"))}
    assert as_of_july == {"acme": (z, z, z, Decimal("86.35"), z, Decimal("86.35"), z),  # day 71
                          "beta": (z, z, z, z, z, z, Decimal("40.86"))}  # beta-2 reversed that day
    # finance (readonly) reads NULL where a payment stands and a legacy invoice has no terms, not 1970-01-01
    reversed_on = dict(db.query("SELECT ref, reversed_on FROM v_payments"))
    assert reversed_on == {"acme-1": None, "beta-1": None, "beta-2": date(2026, 7, 5)}
    terms = {n: (i, d) for n, i, d in db.query("SELECT number, issued_on, due_on FROM v_invoice_payments")}
    assert terms["GB-2026-000001"] == (None, None) and terms["GB-2026-000003"] == (date(2026, 5, 10), date(2026, 5, 25))

    # and `gpubill receivables` (billing.accounts.receivables) says the same, read by the writer
    with open_database(billed_gateway.dsn, migrate=False) as writer:
        for as_of, rows in ((date(2026, 6, 30), run(db, 15)), (date(2026, 5, 20), None), (date(2026, 7, 5), None)):
            expected = rows if rows is not None else db.query_dicts(sql.replace("2026-06-30", str(as_of)))
            found, total = receivables(writer, RULES, as_of)
            assert [(a.tenant, *(getattr(a, k) for k in ("current", "d1_30", "d31_60", "d61_90", "d90_plus",
                                                          "outstanding", "unapplied"))) for a in found] == [
                (r["tenant"], *_aging(r)) for r in expected], as_of
            assert total.outstanding == sum((r["outstanding"] for r in expected), Decimal(0))
