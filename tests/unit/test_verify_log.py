"""billing/verify_log.py on chDB: what the live database bills a period, before credits and VAT,
through late adjustments on other invoices, credit notes on either, a void and its replacement;
and the log side, a first invoice's charges without credits. Figures by hand: A800 at ¥1/s
(tests/e2e/rules), one hour of its own per tenant (tests/unit/test_invoice_lock_runs.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from billing.credit_notes import create_credit_note, void_invoice
from billing.invoicing import run_period
from billing.tenants import add_tenant
from billing.verify_log import Billed, billed_charges, compare, log_charges
from tests.unit.test_invoice_lock_runs import NOW, PERIOD, RULES, db, no_margin, seed_tenants  # noqa: F401 (fixtures)

APRIL, APRIL_NOW = "2026-04", datetime(2026, 5, 10, tzinfo=UTC)
D = Decimal


def differences(db, period: str) -> dict[str, Decimal]:
    return {c.tenant: c.difference for c in compare(log_charges(db, RULES, period), billed_charges(db, period))
            if c.difference}


def test_billed_is_the_periods_charges_wherever_they_were_invoiced_less_what_was_credited(db):
    # March: t01 7 s → GB-2026-000001 7.00 (unregistered: no credit); t02 30 s → GB-2026-000002
    #   30.00 less its ¥10 trial credit: a credit is not a charge, its line does not count
    add_tenant(db, "t02", "Tenant Two")
    seed_tenants(db, {"t01": 7, "t02": 30})
    assert run_period(db, RULES, PERIOD, now=NOW).created == ["GB-2026-000001", "GB-2026-000002"]
    assert log_charges(db, RULES, PERIOD) == {"t01": D("7.00"), "t02": D("30.00")}
    assert billed_charges(db, PERIOD) == {"t01": Billed(invoice=D("7.00")), "t02": Billed(invoice=D("30.00"))}
    assert differences(db, PERIOD) == {}

    # late March data (12 s in all) and 3 s of April: April's GB-2026-000003 carries 3.00 and
    #   an adjustment of +5.00 for March; March is billed 7.00 + 5.00 = 12.00, April 3.00
    seed_tenants(db, {"t01": 12})
    seed_tenants(db, {"t01": 3}, period=APRIL)
    assert run_period(db, RULES, APRIL, now=APRIL_NOW).created == ["GB-2026-000003"]
    assert billed_charges(db, PERIOD)["t01"] == Billed(invoice=D("7.00"), adjustments=D("5.00"))
    assert billed_charges(db, APRIL) == {"t01": Billed(invoice=D("3.00"))}
    assert differences(db, PERIOD) == differences(db, APRIL) == {}

    # credit notes on April's invoice: 2.00 of its March adjustment is March's, 1.00 of its rent April's
    create_credit_note(db, RULES, "GB-2026-000003", "goodwill", {2: D("2.00"), 1: D("1.00")}, actor="os:test")
    assert billed_charges(db, PERIOD)["t01"] == Billed(invoice=D("7.00"), adjustments=D("5.00"), credited=D("2.00"))
    assert billed_charges(db, APRIL)["t01"].total == D("2.00")
    assert differences(db, PERIOD) == {"t01": D("-2.00")} and differences(db, APRIL) == {"t01": D("-1.00")}

    # void March's GB-2026-000001 (its note counts for nothing with it); the replacement
    #   GB-2026-000004: rent 12.00 and −5.00 already charged on April's → 7.00 + 5.00 − 2.00 = 10.00
    void_invoice(db, RULES, "GB-2026-000001", "wrong plan", actor="os:test")
    assert billed_charges(db, PERIOD)["t01"] == Billed(adjustments=D("5.00"), credited=D("2.00"))
    assert run_period(db, RULES, PERIOD, now=NOW).created == ["GB-2026-000004"]
    assert billed_charges(db, PERIOD)["t01"] == Billed(invoice=D("7.00"), adjustments=D("5.00"), credited=D("2.00"))
    assert differences(db, PERIOD) == {"t01": D("-2.00")}

    # a void of t02's invoice with no replacement yet: billed nothing, the log 30.00
    void_invoice(db, RULES, "GB-2026-000002", "wrong tenant", actor="os:test")
    assert differences(db, PERIOD) == {"t01": D("-2.00"), "t02": D("-30.00")}
    assert [(c.tenant, c.log, c.billed.total) for c in compare(log_charges(db, RULES, PERIOD),
                                                               billed_charges(db, PERIOD))] == [
        ("t01", D("12.00"), D("10.00")), ("t02", D("30.00"), D("0.00"))]
