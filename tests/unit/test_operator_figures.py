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
¥14 595.711 (the operator's ¥14 592 rounds each card to ¥228: 64 × 228).

Priced here through the rules and aggregate pricing: one aggregate per card per hour,
tenant "op" on monthly plans for all three models.
"""

from __future__ import annotations

import shutil
from fractions import Fraction

import pytest

from billing_rules import DEFAULT_RULES_DIR, RuleSet, load_rules
from billing_rules.aggregate import AggregateColumns, PricedAggregates, price_aggregates

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


def a_month(rules: RuleSet, model: str, power_w: int, cards: int) -> PricedAggregates:
    start, end = rules.period_bounds("2026-04")
    hours = range(start, end, 3600)
    rows = [
        ("op", f"inst-{card // 8}", f"GPU-{card}", model, "gz-guian", h, h + 3600, 3600, power_w * 1000 * 3600)
        for card in range(cards)
        for h in hours
    ]
    return price_aggregates(rules, AggregateColumns.from_rows(rows))


@pytest.mark.parametrize(
    ("model", "power_w", "monthly", "electricity", "table_yuan", "share_pct"),
    [
        ("RTX4090", 203, 599, Fraction("54.020736"), 54, 9),
        ("A800-80G", 857, 3180, Fraction("228.057984"), 228, 7),
        ("H800-80G", 947, 4680, Fraction("252.008064"), 252, 5),
    ],
)
def test_one_card_for_a_month_at_guian(
    rules: RuleSet, model: str, power_w: int, monthly: int, electricity: Fraction, table_yuan: int, share_pct: int
) -> None:
    priced = a_month(rules, model, power_w, cards=1)
    (rent,) = priced.rent
    (energy,) = priced.energy
    assert (rent.rate.plan, rent.seconds, rent.amount) == ("monthly", 2_592_000, monthly)  # 720 h × price / 720 h
    assert (energy.rate.band, str(energy.rate.pue), str(energy.rate.tariff_per_kwh)) == ("flat", "1.12", "0.33")
    assert energy.amount == electricity
    assert abs(energy.amount - table_yuan) <= 1
    assert round(energy.amount / rent.amount * 100) == share_pct


def test_a_64_card_a800_cluster(rules: RuleSet) -> None:
    priced = a_month(rules, "A800-80G", 857, cards=64)
    (rent,) = priced.rent
    (energy,) = priced.energy
    assert rent.amount == 203_520  # 64 × ¥3180
    assert energy.amount == 64 * Fraction("228.057984")  # ¥14 595.711 …
    assert abs(energy.amount - 14_592) <= 100
    # the same from the per-second rates: 64 cards × 2 592 000 s × 857 000 mJ/s
    second = rules.period_bounds("2026-04")[0]
    rate = rules.energy_rate("gz-guian", second)
    assert rate.cost(64 * 2_592_000 * 857_000) == energy.amount
    assert 64 * 2_592_000 * rules.rent_rate("op", "A800-80G", second).per_second == 203_520
