"""How an invoice is paid (billing/settlement.py): due date, prepaid settlement, credit left.

The usage is tests/unit/test_balances.py's fixture (acme and beta registered on 2026-03-01):

    beta  March total ¥752.60 (rent ¥800.00 − 10 % ¥80.00 − trial ¥10.00 = ¥710.00, VAT ¥42.60)
    acme  March ¥157.70 before credits: its ¥150.00 onboarding credit (March only) first, then
          ¥7.70 of the ¥10.00 trial → total ¥0.00, ¥2.30 of the trial left

The run is at APRIL_2 = 2026-04-02T00:00Z = 08:00 in Shanghai: the issue date is 2026-04-02
and with 15 days' terms (tests/e2e/rules/billing.toml) the due date is 2026-04-17.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal as D

from billing.balances import top_up
from billing.invoicing import load_invoice, run_period
from billing.settlement import credits_left, issue_date, settlement_of
from tests.unit.test_balances import APRIL_2, db  # noqa: F401  (the fixture)
from tests.unit.test_current_usage import PERIOD, RULES

BEFORE_RUN = APRIL_2 - timedelta(hours=1)


def test_a_postpaid_invoice_is_due_its_total_after_the_payment_terms(db):  # noqa: F811
    run_period(db, RULES, PERIOD, now=APRIL_2)
    settlement = settlement_of(db, RULES, load_invoice(db, "beta", PERIOD))
    assert RULES.payment_terms_days == 15
    assert (settlement.prepaid, settlement.balance_after) == (False, None)
    assert settlement.amount_due == D("752.60") and not settlement.settled
    assert (settlement.issue_date, settlement.due_date) == (date(2026, 4, 2), date(2026, 4, 17))


def test_a_prepaid_invoice_the_balance_covers_is_settled_with_the_balance_after_it(db):  # noqa: F811
    top_up(db, "beta", "1000", "tx-1", now=BEFORE_RUN)
    run_period(db, RULES, PERIOD, now=APRIL_2)
    settlement = settlement_of(db, RULES, load_invoice(db, "beta", PERIOD))
    # 1000.00 − 752.60 = 247.40
    assert (settlement.prepaid, settlement.balance_after, settlement.amount_due) == (True, D("247.40"), D("0.00"))
    assert settlement.settled and settlement.due_date is None


def test_a_prepaid_invoice_the_balance_does_not_cover_is_due_the_shortfall(db):  # noqa: F811
    top_up(db, "beta", "500", "tx-1", now=BEFORE_RUN)
    top_up(db, "beta", "400", "tx-late", now=APRIL_2 + timedelta(days=1))  # after the invoice: not counted
    run_period(db, RULES, PERIOD, now=APRIL_2)
    settlement = settlement_of(db, RULES, load_invoice(db, "beta", PERIOD))
    # 500.00 − 752.60 = −252.60: ¥252.60 due in 15 days
    assert (settlement.balance_after, settlement.amount_due) == (D("-252.60"), D("252.60"))
    assert settlement.due_date == date(2026, 4, 17)


def test_a_zero_invoice_is_settled(db):  # noqa: F811
    run_period(db, RULES, PERIOD, now=APRIL_2)
    settlement = settlement_of(db, RULES, load_invoice(db, "acme", PERIOD))
    assert settlement.amount_due == D("0.00") and settlement.settled and settlement.due_date is None


def test_credit_left_after_an_invoice_is_what_its_grants_did_not_spend(db):  # noqa: F811
    run_period(db, RULES, PERIOD, now=APRIL_2)
    left = credits_left(db, RULES, "acme", PERIOD)
    # the onboarding credit expired with March; the trial: 10.00 − 7.70 = 2.30
    assert [(c.id, c.remaining) for c in left] == [("trial", D("2.30"))]
    assert credits_left(db, RULES, "beta", PERIOD) == []  # its ¥10.00 trial is spent
    before = credits_left(db, RULES, "acme", now=datetime(2026, 3, 20, tzinfo=timezone.utc))
    assert sorted((c.id, c.remaining) for c in before) == [("acme-onboarding", D("150.00")), ("trial", D("10.00"))]


def test_the_issue_date_is_the_date_in_the_billing_zone():
    assert issue_date(RULES, "2026-12-01T19:24:46Z") == date(2026, 12, 2)  # 03:24 on the 2nd in Shanghai
    assert issue_date(RULES, "2026-12-01T15:59:59.999Z") == date(2026, 12, 1)  # 23:59:59 on the 1st


def test_a_top_up_in_the_same_second_as_the_invoice_counts(db):  # noqa: F811
    # the demo tops up and invoices within one second: 12:00:00.200 then 12:00:00.700; the invoice's
    # RFC 3339 text says 12:00:00, so comparing with it would miss both the top-up and the invoice
    top_up(db, "beta", "1000", "tx-1", now=APRIL_2 + timedelta(milliseconds=200))
    run_period(db, RULES, PERIOD, now=APRIL_2 + timedelta(milliseconds=700))
    settlement = settlement_of(db, RULES, load_invoice(db, "beta", PERIOD))
    assert (settlement.balance_after, settlement.settled) == (D("247.40"), True)  # 1000.00 − 752.60
