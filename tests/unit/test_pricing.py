"""What a second costs (SPEC §4): rent and electricity rates from the rules, worked by hand.

Epoch seconds used below (Asia/Shanghai is UTC+8):
    2026-02-01 00:00 local = 1_769_875_200      2026-03-01 00:00 local = 1_772_294_400
    2026-04-01 00:00 local = 1_774_972_800      March = 31 × 86 400 = 2 678 400 s
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from billing_rules import DEFAULT_RULES_DIR, NoRuleInForce, RuleSet, UnknownModel, UnknownSite, load_rules, round_fen

RULES = load_rules(DEFAULT_RULES_DIR)
FEB_1 = 1_769_875_200
MAR_1 = 1_772_294_400
APR_1 = 1_774_972_800
MJ_PER_KWH = 3_600_000_000


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


def rules_with(tmp_path: Path, **appended: str) -> RuleSet:
    """The shipped rules with text appended to some files (file stem → TOML)."""
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    for stem, text in appended.items():
        with (rules / f"{stem}.toml").open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return load_rules(rules)


def test_epoch_constants() -> None:
    assert (FEB_1, MAR_1, APR_1) == (utc("2026-01-31T16:00:00"), utc("2026-02-28T16:00:00"), utc("2026-03-31T16:00:00"))


# rent -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tenant", "model", "second", "plan", "price", "per_s", "per_hour"),
    [
        # no contract: hourly list rate, per_s = 3600
        ("newbie", "RTX4090", MAR_1, "hourly", "1.25", 3600, Fraction(5, 4)),
        ("newbie", "A800-80G", MAR_1, "hourly", "10.00", 3600, Fraction(10)),
        ("newbie", "H800-80G", MAR_1, "hourly", "14.50", 3600, Fraction(29, 2)),
        # acme has A800-80G monthly from 2026-01-01: ¥3180 over the seconds of the month
        ("acme", "A800-80G", MAR_1, "monthly", "3180.00", 2_678_400, Fraction(3180 * 3600, 2_678_400)),
        ("acme", "A800-80G", FEB_1, "monthly", "3180.00", 2_419_200, Fraction(3180 * 3600, 2_419_200)),
        ("acme", "A800-80G", APR_1 - 1, "monthly", "3180.00", 2_678_400, Fraction(3180 * 3600, 2_678_400)),
        ("acme", "A800-80G", APR_1, "monthly", "3180.00", 2_592_000, Fraction(3180 * 3600, 2_592_000)),
        # the contract starts at 2026-01-01 00:00 local = 2025-12-31T16:00Z
        ("acme", "A800-80G", utc("2025-12-31T15:59:59"), "hourly", "10.00", 3600, Fraction(10)),
        ("acme", "A800-80G", utc("2025-12-31T16:00:00"), "monthly", "3180.00", 31 * 86_400, Fraction(3180 * 3600, 31 * 86_400)),
        # acme's other models are hourly
        ("acme", "RTX4090", MAR_1, "hourly", "1.25", 3600, Fraction(5, 4)),
    ],
)
def test_rent_rate(tenant: str, model: str, second: int, plan: str, price: str, per_s: int, per_hour: Fraction) -> None:
    rate = RULES.rent_rate(tenant, model, second)
    assert (rate.plan, rate.price, rate.per_s) == (plan, Decimal(price), per_s)
    assert rate.unit_price_per_hour == per_hour


def test_february_and_march_differ_per_second_not_per_month() -> None:
    feb = RULES.rent_rate("acme", "A800-80G", FEB_1)
    mar = RULES.rent_rate("acme", "A800-80G", MAR_1)
    # 28 × 86 400 = 2 419 200 s and 31 × 86 400 = 2 678 400 s, both summing to ¥3180
    assert (feb.per_s, mar.per_s) == (2_419_200, 2_678_400)
    assert feb.per_second * 2_419_200 == mar.per_second * 2_678_400 == 3180


MONTHLY_RTX = """
[tenant.lab]

[[tenant.lab.rent]]
gpu_model = "RTX4090"
plan = "monthly"
effective_from = 2026-01-01

[tenant.edu]

[[tenant.edu.rent]]
gpu_model = "RTX4090"
plan = "monthly"
effective_from = 2026-01-01
discount_pct = 10

[[tenant.edu.rent]]
gpu_model = "RTX4090"
plan = "hourly"
effective_from = 2026-03-16
"""


@pytest.mark.parametrize(
    ("tenant", "start", "seconds", "yuan"),
    [
        # a whole March on a monthly RTX4090: 2 678 400 s × ¥599 / 2 678 400 s = ¥599.00
        ("lab", MAR_1, 2_678_400, "599.00"),
        # a whole February: 2 419 200 s × ¥599 / 2 419 200 s = ¥599.00
        ("lab", FEB_1, 2_419_200, "599.00"),
        # half of March: 1 339 200 s × 599 / 2 678 400 = ¥299.50
        ("lab", MAR_1, 1_339_200, "299.50"),
        # one day of March: 86 400 × 599 / 2 678 400 = 19.3225806… → ¥19.32
        ("lab", MAR_1, 86_400, "19.32"),
        # 10 % off: a whole February 599 × 0.90 = ¥539.10
        ("edu", FEB_1, 2_419_200, "539.10"),
    ],
)
def test_monthly_rent_sums_to_the_monthly_price(tmp_path: Path, tenant: str, start: int, seconds: int, yuan: str) -> None:
    rules = rules_with(tmp_path, contracts=MONTHLY_RTX)
    rate = rules.rent_rate(tenant, "RTX4090", start)
    # every second of the span has the same rate, so the sum is seconds × rate
    assert rules.rent_rate(tenant, "RTX4090", start + seconds - 1) == rate
    assert round_fen(seconds * rate.per_second) == Decimal(yuan)


def test_discount_is_in_the_price(tmp_path: Path) -> None:
    rules = rules_with(tmp_path, contracts=MONTHLY_RTX)
    rate = rules.rent_rate("edu", "RTX4090", MAR_1)
    # 599 × (100 − 10) / 100 = 539.1
    assert (rate.plan, rate.price, rate.list_price, rate.discount_pct) == ("monthly", Decimal("539.1"), Decimal("599.00"), 10)
    # edu goes back to hourly on 2026-03-16 00:00 local = 2026-03-15T16:00Z
    assert rules.rent_rate("edu", "RTX4090", utc("2026-03-15T15:59:59")).plan == "monthly"
    back = rules.rent_rate("edu", "RTX4090", utc("2026-03-15T16:00:00"))
    assert (back.plan, back.price, back.per_s) == ("hourly", Decimal("1.25"), 3600)  # the new term has no discount


@pytest.mark.parametrize(
    ("model", "seconds", "yuan"),
    [
        ("RTX4090", 8 * 3600, "10.00"),  # 28 800 s × ¥1.25 / 3600 = ¥10.00 (the trial credit)
        ("A800-80G", 3600, "10.00"),  # 3600 s × ¥10 / 3600 = ¥10.00
        ("H800-80G", 1800, "7.25"),  # 1800 s × ¥14.50 / 3600 = ¥7.25
        ("RTX4090", 1, "0.00"),  # ¥0.000347… per second
    ],
)
def test_hourly_rent(model: str, seconds: int, yuan: str) -> None:
    rate = RULES.rent_rate("newbie", model, MAR_1)
    assert round_fen(seconds * Fraction(rate.price) / rate.per_s) == Decimal(yuan)


def test_rent_price_changes_at_its_effective_from(tmp_path: Path) -> None:
    rules = rules_with(
        tmp_path,
        catalog='[model.L40S]\nname = "NVIDIA L40S"\n\n'
        "[[model.L40S.price]]\neffective_from = 2026-01-01\nmonthly = 1500\nhourly = 3\n\n"
        "[[model.L40S.price]]\neffective_from = 2026-03-10\nmonthly = 1400\nhourly = 2.8\n",
    )
    # 2026-03-10 00:00 local = 2026-03-09T16:00Z
    assert rules.rent_rate("x", "L40S", utc("2026-03-09T15:59:59")).price == 3
    assert rules.rent_rate("x", "L40S", utc("2026-03-09T16:00:00")).price == Decimal("2.8")
    with pytest.raises(NoRuleInForce, match="no price for L40S before 2026-01-01"):
        rules.rent_rate("x", "L40S", utc("2025-12-31T15:59:59"))


def test_unknown_model() -> None:
    with pytest.raises(UnknownModel, match="RTX3090"):
        RULES.rent_rate("acme", "RTX3090", MAR_1)


# electricity --------------------------------------------------------------------------

THIRTY_DAYS_S = 30 * 86_400  # 2 592 000 s


@pytest.mark.parametrize(
    ("site", "power_mw", "yuan", "exact"),
    [
        # A800 at 857 W for 30 days at Gui'an (SPEC §1: ¥228):
        #   857 000 mW × 2 592 000 s = 2 221 344 000 000 mJ = 617.04 kWh IT
        #   × 1.12 = 691.0848 kWh billed × ¥0.33 = ¥228.057984 → ¥228.06
        ("gz-guian", 857_000, "228.06", Fraction(228_057_984, 10**6)),
        # RTX 4090 at 203 W: 526 176 000 000 mJ = 146.16 kWh × 1.12 × 0.33 = ¥54.020736 → ¥54.02
        ("gz-guian", 203_000, "54.02", Fraction(54_020_736, 10**6)),
        # H800 at 947 W: 2 454 624 000 000 mJ = 681.84 kWh × 1.12 × 0.33 = ¥252.008064 → ¥252.01
        ("gz-guian", 947_000, "252.01", Fraction(252_008_064, 10**6)),
        # the same A800 at the East-coast site: 617.04 kWh × 1.30 × ¥0.65 = ¥521.3988 → ¥521.40
        ("sh-east", 857_000, "521.40", Fraction(5_213_988, 10**4)),
    ],
)
def test_electricity_of_a_month(site: str, power_mw: int, yuan: str, exact: Fraction) -> None:
    energy_mj = power_mw * THIRTY_DAYS_S
    rate = RULES.energy_rate(site, MAR_1)
    assert rate.band == "flat"
    assert rate.cost(energy_mj) == exact
    assert energy_mj * Fraction(rate.pue) * Fraction(rate.tariff_per_kwh) / MJ_PER_KWH == exact
    assert round_fen(rate.cost(energy_mj)) == Decimal(yuan)


def test_energy_rate_values() -> None:
    gz = RULES.energy_rate("gz-guian", MAR_1)
    sh = RULES.energy_rate("sh-east", MAR_1)
    assert (gz.band, gz.tariff_per_kwh, gz.pue) == ("flat", Decimal("0.33"), Decimal("1.12"))
    assert (sh.band, sh.tariff_per_kwh, sh.pue) == ("flat", Decimal("0.65"), Decimal("1.30"))
    # 3.6e9 mJ IT = 1 kWh IT → 1.12 kWh billed
    assert gz.billed_kwh(MJ_PER_KWH) == Fraction(112, 100)


TIME_OF_USE = """
[site.gz-tou]
name = "Gui'an hall 2 (time of use)"
timezone = "Asia/Shanghai"
green_share = 0.85
tariff_cap_per_kwh = 0.35

[[site.gz-tou.pue]]
effective_from = 2026-01-01
pue = 1.12

[[site.gz-tou.pue]]
effective_from = 2026-04-01
pue = 1.10

[[site.gz-tou.tariff]]
effective_from = 2026-01-01
bands = [
  { name = "peak",   start = "08:00", end = "22:00", price_per_kwh = 0.35 },
  { name = "valley", start = "00:00", end = "08:00", price_per_kwh = 0.25 },
  { name = "valley", start = "22:00", end = "24:00", price_per_kwh = 0.25 },
]

[[site.gz-tou.tariff]]
effective_from = 2026-04-01
bands = [{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.33 }]
"""


@pytest.mark.parametrize(
    ("instant_utc", "local", "band", "tariff", "pue"),
    [
        ("2026-03-09T23:59:59", "03-10 07:59:59", "valley", "0.25", "1.12"),
        ("2026-03-10T00:00:00", "03-10 08:00:00", "peak", "0.35", "1.12"),
        ("2026-03-10T13:59:59", "03-10 21:59:59", "peak", "0.35", "1.12"),
        ("2026-03-10T14:00:00", "03-10 22:00:00", "valley", "0.25", "1.12"),
        ("2026-03-31T15:59:59", "03-31 23:59:59", "valley", "0.25", "1.12"),
        ("2026-03-31T16:00:00", "04-01 00:00:00", "flat", "0.33", "1.10"),  # new versions at local midnight
    ],
)
def test_time_of_use_bands(tmp_path: Path, instant_utc: str, local: str, band: str, tariff: str, pue: str) -> None:
    rules = rules_with(tmp_path, sites=TIME_OF_USE)
    rate = rules.energy_rate("gz-tou", utc(instant_utc))
    assert (rate.band, rate.tariff_per_kwh, rate.pue) == (band, Decimal(tariff), Decimal(pue))


def test_energy_before_first_version_and_unknown_site(tmp_path: Path) -> None:
    rules = rules_with(tmp_path, sites=TIME_OF_USE)
    with pytest.raises(NoRuleInForce, match="gz-tou before 2026-01-01"):
        rules.energy_rate("gz-tou", utc("2025-12-31T15:59:59"))
    with pytest.raises(UnknownSite, match="'nowhere'"):
        rules.energy_rate("nowhere", MAR_1)
    with pytest.raises(UnknownSite):
        rules.site("nowhere")


def test_lookups_are_cached_and_stable() -> None:
    # the second call answers from the cache; the answer must be the same value
    first = [RULES.rent_rate("acme", "A800-80G", MAR_1 + s) for s in range(0, 86_400 * 3, 3600)]
    again = [RULES.rent_rate("acme", "A800-80G", MAR_1 + s) for s in range(0, 86_400 * 3, 3600)]
    assert first == again
