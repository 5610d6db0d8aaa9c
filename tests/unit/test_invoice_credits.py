"""Discount lines and credit grants on invoices (SPEC §5), arithmetic by hand in comments."""

from __future__ import annotations

from decimal import Decimal as D

import pytest

from billing_rules import CreditBalance, CreditGrant, RentUsage, build_invoice, credit_balances

VAT = D("0.06")
MARCH_S = 31 * 86_400


def test_a_contract_discount_is_its_own_negative_line():
    # 720 h of an A800 at ¥10/h = ¥7,200.00 rent; 15 % discount = −¥1,080.00 (720 GPU-h × −¥1.5/h)
    # subtotal 7,200.00 (rent only); net 7,200.00 − 1,080.00 = 6,120.00; VAT 367.20; total 6,487.20
    draft = build_invoice("t", "2026-03", [RentUsage("A800-80G", "hourly", D("10"), 3600, 720 * 3600, D("15"))],
                          [], [], D(0), VAT)
    rent, discount = draft.lines
    assert (rent.kind, rent.amount, rent.unit_price) == ("rent", D("7200.00"), D("10.000000"))
    assert (discount.kind, discount.quantity, discount.unit_price, discount.amount) == (
        "discount", D("720.000000"), D("-1.500000"), D("-1080.00"))
    assert (draft.subtotal, draft.net, draft.tax, draft.total) == (D("7200.00"), D("6120.00"), D("367.20"), D("6487.20"))


def test_a_discount_on_a_monthly_plan_rounds_once_per_line():
    # one RTX4090 for all of March on ¥599/month with 12.5 % off: 599 × 0.125 = 74.875 → −74.88
    draft = build_invoice("t", "2026-03", [RentUsage("RTX4090", "monthly", D("599"), MARCH_S, MARCH_S, D("12.5"))],
                          [], [], D(0), VAT)
    assert [line.amount for line in draft.lines] == [D("599.00"), D("-74.88")]
    assert draft.net == D("524.12")


def test_credits_spend_the_soonest_expiring_grant_first_and_never_below_zero():
    # owed ¥30.00 (3 h × ¥10); grants: trial ¥10 (no expiry), promo ¥25 expiring 2026-03
    # → promo −25.00 first, then trial −5.00 (¥5 of it carries over); net 0.00
    balances = [CreditBalance("trial", "New-user trial credit", D("10.00")),
                CreditBalance("promo", "Spring promotion", D("25.00"), "2026-03")]
    draft = build_invoice("t", "2026-03", [RentUsage("A800-80G", "hourly", D("10"), 3600, 3 * 3600)], [], [],
                          balances, VAT)
    credits = [(line.credit_id, line.amount) for line in draft.lines if line.kind == "credit"]
    assert credits == [("promo", D("-25.00")), ("trial", D("-5.00"))]
    assert (draft.credit_used, draft.net, draft.tax, draft.total) == (D("30.00"), D("0.00"), D("0.00"), D("0.00"))


@pytest.mark.parametrize("period, used, expected", [
    # promo ¥25 expires after 2026-03: usable in March, gone in April whatever is left of it
    ("2026-03", {}, [("trial", D("10.00")), ("promo", D("25.00"))]),
    ("2026-03", {"promo": D("20.00")}, [("trial", D("10.00")), ("promo", D("5.00"))]),
    ("2026-04", {"promo": D("20.00")}, [("trial", D("10.00"))]),
    ("2026-04", {"trial": D("10.00")}, []),
])
def test_credit_balances_honour_expiry_and_what_was_spent(period, used, expected):
    grants = [CreditGrant("trial", D("10.00"), "New-user trial credit", None),
              CreditGrant("promo", D("25.00"), "Spring promotion", "2026-03")]
    assert [(b.id, b.remaining) for b in credit_balances(grants, used, period)] == expected


def test_an_expired_balance_passed_in_is_not_spent():
    draft = build_invoice("t", "2026-04", [RentUsage("A800-80G", "hourly", D("10"), 3600, 3600)], [], [],
                          [CreditBalance("promo", "Spring promotion", D("25.00"), "2026-03")], VAT)
    assert draft.credit_used == D("0.00") and draft.net == D("10.00")
