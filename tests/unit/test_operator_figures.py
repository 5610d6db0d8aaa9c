"""The operator's table (SPEC §1, issue 3) reproduced from first principles.

A 30-day month: April 2026 in Asia/Shanghai, 30 × 86 400 = 2 592 000 s = 720 h.
Gui'an: PUE 1.12, ¥0.33/kWh flat. Average IT power per card: RTX 4090 203 W,
A800 857 W, H800 947 W. Monthly rent: ¥599 / ¥3180 / ¥4680.

Electricity of one card for the month, by hand:
    RTX 4090: 0.203 kW × 720 h = 146.16 kWh × 1.12 = 163.6992 kWh × 0.33 = ¥54.020736
    A800:     0.857 kW × 720 h = 617.04 kWh × 1.12 = 691.0848 kWh × 0.33 = ¥228.057984
    H800:     0.947 kW × 720 h = 681.84 kWh × 1.12 = 763.6608 kWh × 0.33 = ¥252.008064
Shares of monthly rent: 54.02 / 599 = 9.0 %, 228.06 / 3180 = 7.2 %, 252.01 / 4680 = 5.4 %.
A 64-card A800 cluster: rent 64 × 3180 = ¥203 520; electricity 64 × 228.057984 =
¥14 595.710976 (the operator's ¥14 592 rounds each card to ¥228: 64 × 228).

Priced here the way the billing run prices a month, with the pure `billing_rules` code:
the rater asks `RuleSet.rent_rate` and `RuleSet.energy_rate` for the rate of every rented
second and every power reading and stores the rate's terms on the rated row
(streams/rating/reference.py); the run sums seconds and millijoules per terms into
`RentUsage` and `EnergyUsage` (as `usage.by_tenant.usage_by_tenant` reads them for the invoice run) and `build_invoice`
makes the lines. A month of per-second lookups is 2.6 million per card, too slow for a
unit test, so each card-hour is priced as 3600 seconds at the rates of its first second,
after checking that its last second has the same rates (the shipped Gui'an rules change
at most at local midnight). Tenant "op" is on monthly plans for all three models; every
card draws its model's average power all month. No credit is applied, so the lines are
the month's charges.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from decimal import Decimal
from fractions import Fraction

import pytest

from billing_rules import (
    DEFAULT_RULES_DIR,
    EnergyUsage,
    InvoiceDraft,
    InvoiceLine,
    RentUsage,
    RuleSet,
    build_invoice,
    load_rules,
)

PERIOD = "2026-04"
SITE = "gz-guian"
MONTHLY_OP = "\n".join(
    f'[[tenant.op.rent]]\ngpu_model = "{model}"\nplan = "monthly"\neffective_from = 2026-01-01\n'
    for model in ("RTX4090", "A800-80G", "H800-80G")
)


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    directory = tmp_path_factory.mktemp("operator") / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, directory)
    with (directory / "contracts.toml").open("a", encoding="utf-8") as f:
        f.write("\n[tenant.op]\n\n" + MONTHLY_OP)
    return load_rules(directory)


def a_month(rules: RuleSet, model: str, power_w: int, cards: int) -> tuple[InvoiceDraft, int, int]:
    """The invoice of `cards` cards of `model` rented by "op" at Gui'an all April, drawing
    `power_w` each; with the rented GPU-seconds and the IT millijoules it priced."""
    start, end = rules.period_bounds(PERIOD)
    rent_s: dict[tuple, int] = defaultdict(int)  # the rated row's rent terms -> GPU-seconds
    energy_mj: dict[tuple, int] = defaultdict(int)  # its energy terms -> IT millijoules
    for hour in range(start, end, 3600):
        rent = rules.rent_rate("op", model, hour)
        energy = rules.energy_rate(SITE, hour)
        assert (rules.rent_rate("op", model, hour + 3599), rules.energy_rate(SITE, hour + 3599)) == (rent, energy)
        for _card in range(cards):
            rent_s[model, rent.plan, rent.list_price, rent.per_s, rent.discount_pct] += 3600
            energy_mj[SITE, energy.band, energy.tariff_per_kwh, energy.pue] += power_w * 1000 * 3600  # mW × s = mJ
    rent_usages = [
        RentUsage(gpu_model=m, plan=plan, price=price, per_s=per_s, seconds=seconds, discount_pct=pct)
        for (m, plan, price, per_s, pct), seconds in rent_s.items()
    ]
    energy_usages = [
        EnergyUsage(site=site, band=band, tariff_per_kwh=tariff, pue=pue, energy_mj=mj)
        for (site, band, tariff, pue), mj in energy_mj.items()
    ]
    draft = build_invoice("op", PERIOD, rent_usages, energy_usages, [], Decimal(0), rules.vat_rate(PERIOD))
    return draft, sum(rent_s.values()), sum(energy_mj.values())


def the_lines(draft: InvoiceDraft) -> tuple[InvoiceLine, InvoiceLine]:
    """The draft's one rent line and one electricity line (and nothing else)."""
    assert [line.kind for line in draft.lines] == ["rent", "electricity"]
    rent, electricity = draft.lines
    return rent, electricity


@pytest.mark.parametrize(
    ("model", "power_w", "monthly", "per_hour", "kwh", "electricity", "fen", "table_yuan", "share_pct"),
    [
        # ¥599 / 720 h = ¥0.8319444… per GPU-hour; 163.6992 kWh; ¥54.020736 → ¥54.02
        ("RTX4090", 203, 599, "0.831944", "163.6992", "54.020736", "54.02", 54, 9),
        # ¥3180 / 720 h = ¥4.416666…; 691.0848 kWh; ¥228.057984 → ¥228.06
        ("A800-80G", 857, 3180, "4.416667", "691.0848", "228.057984", "228.06", 228, 7),
        # ¥4680 / 720 h = ¥6.5; 763.6608 kWh; ¥252.008064 → ¥252.01
        ("H800-80G", 947, 4680, "6.5", "763.6608", "252.008064", "252.01", 252, 5),
    ],
)
def test_one_card_for_a_month_at_guian(
    rules: RuleSet, model: str, power_w: int, monthly: int, per_hour: str, kwh: str, electricity: str, fen: str,
    table_yuan: int, share_pct: int,
) -> None:
    draft, seconds, mj = a_month(rules, model, power_w, cards=1)
    assert (seconds, mj) == (2_592_000, power_w * 1000 * 2_592_000)
    rent, energy = the_lines(draft)
    assert (rent.gpu_model, rent.plan, rent.quantity, rent.unit_price) == (model, "monthly", 720, Decimal(per_hour))
    assert (rent.exact_amount, rent.amount) == (monthly, monthly)  # 720 h × price / 720 h
    assert (energy.site, energy.band, energy.pue, energy.unit_price) == (SITE, "flat", Decimal("1.12"), Decimal("0.33"))
    assert energy.quantity == Decimal(kwh)
    assert (energy.exact_amount, energy.amount) == (Fraction(electricity), Decimal(fen))
    assert abs(energy.exact_amount - table_yuan) <= 1
    assert round(energy.exact_amount / rent.exact_amount * 100) == share_pct


def test_a_64_card_a800_cluster(rules: RuleSet) -> None:
    draft, seconds, mj = a_month(rules, "A800-80G", 857, cards=64)
    rent, energy = the_lines(draft)
    assert (rent.quantity, rent.exact_amount, rent.amount) == (64 * 720, 203_520, Decimal("203520.00"))  # 64 × ¥3180
    assert energy.quantity == Decimal("44229.4272")  # 64 × 691.0848 kWh
    assert energy.exact_amount == 64 * Fraction("228.057984")  # ¥14 595.710976
    assert energy.amount == Decimal("14595.71")
    assert abs(energy.exact_amount - 14_592) <= 100
    # subtotal 203 520.00 + 14 595.71 = ¥218 115.71; the operator's ¥218.6k adds its rounded
    # ¥204k and ¥14.6k (within ¥0.5k + ¥0.05k). VAT 6 %: 13 086.9426 → ¥13 086.94.
    assert (draft.subtotal, draft.net, draft.tax, draft.total) == (
        Decimal("218115.71"), Decimal("218115.71"), Decimal("13086.94"), Decimal("231202.65"),
    )
    assert abs(draft.subtotal - 218_600) <= 550
    # the same from the per-second rates: 64 cards × 2 592 000 s × 857 000 mJ/s
    assert (seconds, mj) == (64 * 2_592_000, 64 * 2_592_000 * 857_000)
    second = rules.period_bounds(PERIOD)[0]
    assert rules.energy_rate(SITE, second).cost(64 * 2_592_000 * 857_000) == energy.exact_amount
    assert 64 * 2_592_000 * rules.rent_rate("op", "A800-80G", second).per_second == 203_520
