"""Invoice assembly (SPEC §5), table-driven; every expected value is worked out in a comment.

Rates used (shipped rules): RTX4090 ¥1.25/h or ¥599/month, A800-80G ¥10/h or ¥3180/month,
Gui'an ¥0.33/kWh at PUE 1.12, East coast ¥0.65/kWh at PUE 1.30. March 2026 = 2 678 400 s.
"""

from __future__ import annotations

from decimal import Decimal as D
from fractions import Fraction as F

import pytest

from billing_rules import Adjustment, CreditGrant, EnergyUsage, RentUsage, build_invoice, credit_available

MARCH_S = 31 * 86_400
VAT = D("0.06")


def rtx_hourly(seconds: int) -> RentUsage:
    return RentUsage("RTX4090", "hourly", D("1.25"), 3600, seconds)


def a800_monthly(seconds: int) -> RentUsage:
    return RentUsage("A800-80G", "monthly", D("3180.00"), MARCH_S, seconds)


def guian(energy_mj: int, band: str = "flat") -> EnergyUsage:
    return EnergyUsage("gz-guian", band, D("0.33"), D("1.12"), energy_mj)


def test_trial_credit_covers_a_small_invoice_and_carries_over() -> None:
    # 6 h of RTX4090 on demand: 21 600 s × ¥1.25 / 3600 = ¥7.50
    # credit: min(¥10.00 available, ¥7.50) = ¥7.50 → net ¥0.00, tax ¥0.00, total ¥0.00
    draft = build_invoice("newbie", "2026-03", [rtx_hourly(21_600)], [], [], D("10.00"), VAT)
    assert [(line.kind, line.amount) for line in draft.lines] == [("rent", D("7.50")), ("credit", D("-7.50"))]
    assert (draft.subtotal, draft.net, draft.tax, draft.total, draft.credit_used) == (
        D("7.50"), D("0.00"), D("0.00"), D("0.00"), D("7.50")
    )
    # next period: ¥10.00 granted − ¥7.50 used = ¥2.50 left
    trial = CreditGrant("trial", D("10.00"), "New-user trial credit", None)
    assert credit_available([trial], used_before=draft.credit_used) == D("2.50")
    # 8 h the month after: ¥10.00 − ¥2.50 credit = ¥7.50 net; VAT 7.50 × 0.06 = ¥0.45; total ¥7.95
    april = build_invoice("newbie", "2026-04", [rtx_hourly(28_800)], [], [], D("2.50"), VAT)
    assert (april.subtotal, april.credit_used, april.net, april.tax, april.total) == (
        D("10.00"), D("2.50"), D("7.50"), D("0.45"), D("7.95")
    )
    # and then it is gone, never negative
    assert credit_available([trial], used_before=D("10.00")) == D("0.00")
    assert credit_available([trial], used_before=D("12.00")) == D("0.00")


def test_vat_rounds_half_up() -> None:
    # 36 min of RTX4090: 2160 s × 1.25 / 3600 = ¥0.75; VAT 0.75 × 0.06 = 0.045 → ¥0.05 (half-even: 0.04)
    draft = build_invoice("t", "2026-03", [rtx_hourly(2160)], [], [], D("0"), VAT)
    assert (draft.net, draft.tax, draft.total) == (D("0.75"), D("0.05"), D("0.80"))


def test_64_card_a800_cluster_for_march() -> None:
    # SPEC §1: 64 A800 on monthly rent at Gui'an, 857 W each, for all of March.
    # rent: 64 × 2 678 400 s × ¥3180 / 2 678 400 s = ¥203 520.00; 64 × 744 h = 47 616 GPU-hours at ¥4.274194/h
    # energy: 64 × 857 000 mW × 2 678 400 s = 146 904 883 200 000 mJ = 40 806.912 kWh IT
    #   billed: × 1.12 = 45 703.74144 kWh; cost: × ¥0.33 = ¥15 082.2346752 → ¥15 082.23
    # subtotal 203 520.00 + 15 082.23 = 218 602.23; trial credit −10.00 → net 218 592.23
    # VAT 218 592.23 × 0.06 = 13 115.5338 → 13 115.53; total 231 707.76
    rent = [a800_monthly(MARCH_S) for _ in range(64)]
    energy = [guian(857_000 * MARCH_S) for _ in range(64)]
    draft = build_invoice("acme", "2026-03", rent, energy, [], D("10.00"), VAT)
    rent_line, power_line, credit_line = draft.lines
    assert (rent_line.kind, rent_line.gpu_model, rent_line.plan, rent_line.unit) == ("rent", "A800-80G", "monthly", "GPU-hour")
    assert rent_line.quantity == D("47616.000000")  # 64 × 744 h
    assert rent_line.unit_price == D("4.274194")  # 3180 / 744 = 4.2741935…
    assert rent_line.exact_amount == 203_520
    assert rent_line.amount == D("203520.00")
    assert (power_line.kind, power_line.site, power_line.band, power_line.pue, power_line.unit) == (
        "electricity", "gz-guian", "flat", D("1.12"), "kWh"
    )
    assert power_line.quantity == D("45703.741440")
    assert power_line.unit_price == D("0.330000")
    assert power_line.exact_amount == F(15_082_234_675_2, 10**7)
    assert power_line.amount == D("15082.23")
    assert (credit_line.kind, credit_line.amount) == ("credit", D("-10.00"))
    assert (draft.subtotal, draft.net, draft.tax, draft.total) == (
        D("218602.23"), D("218592.23"), D("13115.53"), D("231707.76")
    )


def test_rounding_happens_once_per_line_not_per_reading() -> None:
    # 1000 single seconds of RTX4090: each ¥0.000347…, which alone rounds to ¥0.00;
    # summed exactly: 1000 × 1.25 / 3600 = ¥0.3472… → ¥0.35
    draft = build_invoice("t", "2026-03", [rtx_hourly(1) for _ in range(1000)], [], [], D("0"), VAT)
    (line,) = draft.lines
    assert line.exact_amount == F(1000 * 125, 100 * 3600)
    assert line.amount == D("0.35")
    assert line.quantity == D("0.277778")  # 1000 / 3600 h


def test_lines_are_grouped_and_ordered() -> None:
    rent = [
        rtx_hourly(3600),  # RTX4090 hourly: 1 h + 2 h = 3 h × 1.25 = ¥3.75
        RentUsage("A800-80G", "hourly", D("10.00"), 3600, 1800),  # ½ h × 10 = ¥5.00
        rtx_hourly(7200),
        a800_monthly(86_400),  # 1 day: 86 400 × 3180 / 2 678 400 = ¥102.580645… → ¥102.58
    ]
    energy = [
        EnergyUsage("sh-east", "flat", D("0.65"), D("1.30"), 3_600_000_000),  # 1 kWh × 1.30 × 0.65 = ¥0.845 → ¥0.85
        guian(1_800_000_000, "valley"),  # 0.5 kWh × 1.12 × 0.33 = ¥0.1848 → ¥0.18
        guian(7_200_000_000, "peak"),  # 2 kWh × 1.12 × 0.33 = ¥0.7392 → ¥0.74
        guian(1_800_000_000, "valley"),  # merged with the other valley: 1 kWh → ¥0.3696 → ¥0.37
    ]
    adjustments = [
        Adjustment("2026-02", "Late readings of 2026-02-27", D("-1.20")),
        Adjustment("2026-01", "Late readings of 2026-01-31", D("2.00")),
    ]
    draft = build_invoice("t", "2026-03", rent, energy, adjustments, D("0"), VAT)
    got = [(l.kind, l.gpu_model or l.site or l.ref_period, l.plan or l.band, l.amount) for l in draft.lines]
    assert got == [
        ("rent", "A800-80G", "hourly", D("5.00")),
        ("rent", "A800-80G", "monthly", D("102.58")),
        ("rent", "RTX4090", "hourly", D("3.75")),
        ("electricity", "gz-guian", "peak", D("0.74")),
        ("electricity", "gz-guian", "valley", D("0.37")),
        ("electricity", "sh-east", "flat", D("0.85")),
        ("adjustment", "2026-01", None, D("2.00")),
        ("adjustment", "2026-02", None, D("-1.20")),
    ]
    # 5.00 + 102.58 + 3.75 + 0.74 + 0.37 + 0.85 + 2.00 − 1.20 = 114.09; VAT 6.8454 → 6.85; total 120.94
    assert (draft.subtotal, draft.net, draft.tax, draft.total) == (D("114.09"), D("114.09"), D("6.85"), D("120.94"))
    adjustment = draft.lines[6]
    assert (adjustment.quantity, adjustment.unit, adjustment.unit_price, adjustment.description) == (
        D("1"), "", D("2.00"), "Late readings of 2026-01-31"
    )


def test_credit_never_applies_to_a_negative_subtotal() -> None:
    # rent ¥7.50, adjustment −¥20.00 → subtotal −¥12.50; no credit line; credit stays for later
    # VAT −12.50 × 0.06 = −0.75 → total −¥13.25
    draft = build_invoice("t", "2026-03", [rtx_hourly(21_600)], [], [Adjustment("2026-02", "Refund", D("-20.00"))], D("10"), VAT)
    assert [line.kind for line in draft.lines] == ["rent", "adjustment"]
    assert (draft.subtotal, draft.credit_used, draft.net, draft.tax, draft.total) == (
        D("-12.50"), D("0.00"), D("-12.50"), D("-0.75"), D("-13.25")
    )


def test_empty_invoice() -> None:
    draft = build_invoice("t", "2026-03", [], [guian(0)], [], D("10.00"), VAT)
    assert draft.lines == ()
    assert (draft.subtotal, draft.net, draft.tax, draft.total, draft.credit_used) == (D("0"),) * 5


@pytest.mark.parametrize(
    ("rent", "energy", "adjustments", "credit"),
    [
        ([rtx_hourly(-1)], [], [], D("0")),
        ([], [guian(-1)], [], D("0")),
        ([], [], [Adjustment("2026-02", "x", D("0.001"))], D("0")),
        ([], [], [Adjustment("2026-2", "x", D("1"))], D("0")),
        ([], [], [], D("-1")),
    ],
)
def test_bad_input_is_refused(rent: list, energy: list, adjustments: list, credit: D) -> None:
    with pytest.raises(ValueError):
        build_invoice("t", "2026-03", rent, energy, adjustments, credit, VAT)
