"""Hypothesis properties of invoice assembly: lines sum to totals, one rounding within
half a fen, credit never takes net below zero, and input order does not matter."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from billing_rules import Adjustment, EnergyUsage, RentUsage, build_invoice

HALF_FEN = Fraction(1, 200)

prices = st.decimals(min_value=0, max_value=5000, places=2)
rent_usages = st.builds(
    RentUsage,
    gpu_model=st.sampled_from(["RTX4090", "A800-80G", "H800-80G"]),
    plan=st.sampled_from(["monthly", "hourly"]),
    price=st.sampled_from([Decimal("1.25"), Decimal("10.00"), Decimal("599"), Decimal("3180.00")]) | prices,
    per_s=st.sampled_from([3600, 28 * 86_400, 29 * 86_400, 30 * 86_400, 31 * 86_400]),
    seconds=st.integers(min_value=0, max_value=64 * 31 * 86_400),
)
energy_usages = st.builds(
    EnergyUsage,
    site=st.sampled_from(["gz-guian", "sh-east"]),
    band=st.sampled_from(["flat", "peak", "valley"]),
    tariff_per_kwh=st.sampled_from([Decimal("0.33"), Decimal("0.65")]) | st.decimals(min_value=0, max_value=2, places=4),
    pue=st.sampled_from([Decimal("1.12"), Decimal("1.30")]) | st.decimals(min_value=1, max_value=3, places=3),
    energy_mj=st.integers(min_value=0, max_value=5_000 * 1000 * 31 * 86_400),
)
adjustments = st.builds(
    Adjustment,
    ref_period=st.sampled_from(["2026-01", "2026-02"]),
    description=st.sampled_from(["Late readings", "Correction"]),
    amount=st.decimals(min_value=-500, max_value=500, places=2),
)
credits = st.decimals(min_value=0, max_value=1000, places=2)
vat_rates = st.sampled_from([Decimal("0"), Decimal("0.06"), Decimal("0.13")])


@settings(max_examples=300, deadline=None)
@given(
    rent=st.lists(rent_usages, max_size=8),
    energy=st.lists(energy_usages, max_size=8),
    adjs=st.lists(adjustments, max_size=3),
    credit=credits,
    vat=vat_rates,
)
def test_totals_are_the_sum_of_rounded_lines(rent, energy, adjs, credit, vat) -> None:
    draft = build_invoice("t", "2026-03", rent, energy, adjs, credit, vat)
    charges = [line.amount for line in draft.lines if line.kind in ("rent", "electricity", "adjustment")]
    assert draft.subtotal == sum(charges, Decimal(0))
    assert draft.net == sum((line.amount for line in draft.lines), Decimal(0))
    assert draft.total == sum((line.amount for line in draft.lines), Decimal(0)) + draft.tax
    assert abs(Fraction(draft.tax) - Fraction(draft.net) * Fraction(vat)) <= HALF_FEN
    for line in draft.lines:
        assert abs(Fraction(line.amount) - line.exact_amount) <= HALF_FEN
        assert line.amount == line.amount.quantize(Decimal("0.01"))
    # the exact amounts are the exact sums of the inputs
    exact_rent = sum((u.seconds * Fraction(u.price) / u.per_s for u in rent), Fraction(0))
    exact_energy = sum((u.energy_mj * Fraction(u.pue) * Fraction(u.tariff_per_kwh) / 3_600_000_000 for u in energy), Fraction(0))
    assert sum((l.exact_amount for l in draft.lines if l.kind == "rent"), Fraction(0)) == exact_rent
    assert sum((l.exact_amount for l in draft.lines if l.kind == "electricity"), Fraction(0)) == exact_energy


@settings(max_examples=300, deadline=None)
@given(rent=st.lists(rent_usages, max_size=6), adjs=st.lists(adjustments, max_size=2), credit=credits)
def test_credit_never_takes_net_below_zero(rent, adjs, credit) -> None:
    draft = build_invoice("t", "2026-03", rent, [], adjs, credit, Decimal("0.06"))
    assert Decimal(0) <= draft.credit_used <= credit
    assert draft.credit_used <= max(draft.subtotal, Decimal(0))
    if draft.subtotal >= 0:
        assert draft.net >= 0
        # either all the credit was used or the invoice is paid in full by it
        assert draft.credit_used == credit or draft.net == 0
    credit_lines = [line for line in draft.lines if line.kind == "credit"]
    assert [line.amount for line in credit_lines] == ([-draft.credit_used] if draft.credit_used else [])


@settings(max_examples=200, deadline=None)
@given(
    rent=st.lists(rent_usages, max_size=8),
    energy=st.lists(energy_usages, max_size=8),
    adjs=st.lists(adjustments, max_size=3),
    credit=credits,
    data=st.data(),
)
def test_order_of_usage_does_not_matter(rent, energy, adjs, credit, data) -> None:
    # a replay in another order, or split into smaller pieces, gives the same invoice
    shuffled = build_invoice(
        "t",
        "2026-03",
        data.draw(st.permutations(rent)),
        data.draw(st.permutations(energy)),
        data.draw(st.permutations(adjs)),
        credit,
        Decimal("0.06"),
    )
    split_rent = [part for u in rent for part in _halves(u)]
    original = build_invoice("t", "2026-03", split_rent, energy, adjs, credit, Decimal("0.06"))
    assert shuffled == original


def _halves(usage: RentUsage) -> list[RentUsage]:
    first = usage.seconds // 2
    return [
        RentUsage(usage.gpu_model, usage.plan, usage.price, usage.per_s, first),
        RentUsage(usage.gpu_model, usage.plan, usage.price, usage.per_s, usage.seconds - first),
    ]
