"""Time-of-day versions and time-of-use calendars that must be refused, naming file and entry.

Each case appends one site (or catalog/contract entry) with exactly one defect to a copy
of the shipped rules.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from billing_rules import DEFAULT_RULES_DIR, RuleSetInvalid, load_rules

GOOD_SITE = """
[site.tou]
name = "TOU"
timezone = "Europe/Berlin"
green_share = 0.5

[[site.tou.pue]]
effective_from = 2026-01-01
pue = 1.2

[[site.tou.tariff]]
effective_from = 2026-01-01
bands = [{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.30 }]
weekend_bands = [
  { name = "night", start = "00:00", end = "08:00", price_per_kwh = 0.20 },
  { name = "day",   start = "08:00", end = "24:00", price_per_kwh = 0.25 },
]
holidays = [2026-05-01, 2026-12-25]
holiday_bands = [{ name = "holiday", start = "00:00", end = "24:00", price_per_kwh = 0.20 }]

[[site.tou.tariff]]
effective_from = 2026-03-15T12:00:00
bands = [{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.31 }]
"""

WEEKEND_DAY = '{ name = "day",   start = "08:00", end = "24:00", price_per_kwh = 0.25 },'
HOLIDAY_BANDS = 'holiday_bands = [{ name = "holiday", start = "00:00", end = "24:00", price_per_kwh = 0.20 }]'
SECOND_FROM = "effective_from = 2026-03-15T12:00:00"


def test_the_good_site_loads(tmp_path: Path) -> None:
    load_rules(_with(tmp_path, "sites.toml", GOOD_SITE))


CASES = [
    pytest.param(
        WEEKEND_DAY, '{ name = "day", start = "09:00", end = "24:00", price_per_kwh = 0.25 },',
        "sites.toml: site[tou].tariff[0].weekend_bands: bands leave a gap from 08:00 to 09:00",
        id="weekend-gap",
    ),
    pytest.param(
        WEEKEND_DAY, '{ name = "day", start = "07:00", end = "24:00", price_per_kwh = 0.25 },',
        "sites.toml: site[tou].tariff[0].weekend_bands: bands overlap at 07:00",
        id="weekend-overlap",
    ),
    pytest.param(
        HOLIDAY_BANDS, 'holiday_bands = [{ name = "holiday", start = "00:00", end = "23:00", price_per_kwh = 0.20 }]',
        "sites.toml: site[tou].tariff[0].holiday_bands: bands leave a gap from 23:00 to 24:00",
        id="holiday-short-day",
    ),
    pytest.param(
        WEEKEND_DAY, '{ name = "day", start = "08:00", end = "24:00", price_per_kwh = -0.25 },',
        "sites.toml: site[tou].tariff[0].weekend_bands[1].price_per_kwh: input should be greater than or equal to 0",
        id="weekend-negative",
    ),
    pytest.param(
        "holidays = [2026-05-01, 2026-12-25]", 'holidays = ["2026-05-01"]',
        "sites.toml: site[tou].tariff[0].holidays[0]: input should be a valid date, got '2026-05-01'",
        id="holiday-as-string",
    ),
    pytest.param(
        "holidays = [2026-05-01, 2026-12-25]", "holidays = [2026-05-01, 2026-12-25T00:00:00]",
        "sites.toml: site[tou].tariff[0].holidays[1]: input should be a valid date, got '2026-12-25T00:00:00'",
        id="holiday-as-datetime",
    ),
    pytest.param(
        "holidays = [2026-05-01, 2026-12-25]", "holidays = [2026-05-01, 2026-05-01]",
        "sites.toml: site[tou].tariff[0].holidays[1]: 2026-05-01 repeats holidays[0]",
        id="holiday-repeated",
    ),
    pytest.param(
        "holidays = [2026-05-01, 2026-12-25]\n", "",
        "sites.toml: site[tou].tariff[0].holiday_bands: holiday_bands are given but holidays is empty",
        id="holiday-bands-without-holidays",
    ),
    pytest.param(
        SECOND_FROM, "effective_from = 2026-01-01T00:00:00",
        "sites.toml: site[tou].tariff[1].effective_from: 2026-01-01T00:00:00 repeats site[tou].tariff[0]",
        id="datetime-repeats-date",
    ),
    pytest.param(
        SECOND_FROM, "effective_from = 2025-12-31T23:00:00",
        "sites.toml: site[tou].tariff[1].effective_from: 2025-12-31T23:00:00 is earlier than site[tou].tariff[0]"
        " (2026-01-01); list versions oldest first",
        id="datetime-out-of-order",
    ),
    pytest.param(
        SECOND_FROM, "effective_from = 2026-03-15T12:00:00+01:00",
        "sites.toml: site[tou].tariff[1].effective_from: must be a local date-time without a UTC offset",
        id="datetime-with-offset",
    ),
    pytest.param(
        SECOND_FROM, "effective_from = 2026-03-29T02:30:00",
        "sites.toml: site[tou].tariff[1].effective_from: 2026-03-29T02:30:00 does not exist (the clocks skip it)"
        " in Europe/Berlin; pick another time",
        id="datetime-skipped-by-dst",
    ),
    pytest.param(
        SECOND_FROM, "effective_from = 2026-10-25T02:30:00",
        "sites.toml: site[tou].tariff[1].effective_from: 2026-10-25T02:30:00 happens twice (the clocks fall back)"
        " in Europe/Berlin; pick another time",
        id="datetime-repeated-by-dst",
    ),
    pytest.param(
        "effective_from = 2026-01-01\npue = 1.2", "effective_from = 2026-01-01\npue = 1.2\n\n[[site.tou.pue]]\n"
        "effective_from = 2026-02-01T08:00:00\npue = 1.3\n\n[[site.tou.pue]]\neffective_from = 2026-02-01\npue = 1.25",
        "sites.toml: site[tou].pue[2].effective_from: 2026-02-01 is earlier than site[tou].pue[1] (2026-02-01T08:00:00)",
        id="mixed-pue-out-of-order",
    ),
]


@pytest.mark.parametrize(("old", "new", "expected"), CASES)
def test_invalid_schedule_is_refused(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in GOOD_SITE, f"fixture drift: {old!r}"
    rules = _with(tmp_path, "sites.toml", GOOD_SITE.replace(old, new, 1))
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(rules)
    assert str(caught.value).startswith(f"{rules}/{expected}"), str(caught.value)
    assert caught.value.file == str(rules / "sites.toml")


@pytest.mark.parametrize(
    ("file", "text", "expected"),
    [
        pytest.param(
            "catalog.toml",
            '[model.L40S]\nname = "L40S"\n\n[[model.L40S.price]]\neffective_from = 2026-03-10T12:00:00\nmonthly = 1\nhourly = 1\n\n'
            "[[model.L40S.price]]\neffective_from = 2026-03-10T11:59:59\nmonthly = 2\nhourly = 2\n",
            "catalog.toml: model[L40S].price[1].effective_from: 2026-03-10T11:59:59 is earlier than model[L40S].price[0]"
            " (2026-03-10T12:00:00); list versions oldest first",
            id="catalog-datetime-out-of-order",
        ),
        pytest.param(
            "contracts.toml",
            '[tenant.lab]\n\n[[tenant.lab.rent]]\ngpu_model = "RTX4090"\nplan = "monthly"\neffective_from = 2026-03-10T12:00:00\n\n'
            '[[tenant.lab.rent]]\ngpu_model = "RTX4090"\nplan = "hourly"\neffective_from = 2026-03-10\n',
            "contracts.toml: tenant[lab].rent[1].effective_from: 2026-03-10 is earlier than rent[0] (2026-03-10T12:00:00)"
            " for RTX4090; list terms oldest first",
            id="contract-date-before-datetime",
        ),
        pytest.param(
            "contracts.toml",
            '[tenant.lab]\n\n[[tenant.lab.rent]]\ngpu_model = "RTX4090"\nplan = "monthly"\neffective_from = 2024-12-31T23:59:59\n',
            "contracts.toml: tenant[lab].rent[0].effective_from: 2024-12-31T23:59:59 is before catalog.toml prices RTX4090"
            " (from 2025-01-01)",
            id="contract-datetime-before-price",
        ),
    ],
)
def test_invalid_versions_elsewhere(tmp_path: Path, file: str, text: str, expected: str) -> None:
    rules = _with(tmp_path, file, text)
    with pytest.raises(RuleSetInvalid) as caught:
        load_rules(rules)
    assert str(caught.value).startswith(f"{rules}/{expected}"), str(caught.value)


def test_vat_stays_a_date(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    text = (rules / "billing.toml").read_text(encoding="utf-8")
    (rules / "billing.toml").write_text(text.replace("effective_from = 2025-01-01", "effective_from = 2025-01-01T00:00:00"))
    with pytest.raises(RuleSetInvalid, match=r"/billing\.toml: vat\[0\]\.effective_from: input should be a valid date"):
        load_rules(rules)


def _with(tmp_path: Path, file: str, text: str) -> Path:
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    with (rules / file).open("a", encoding="utf-8") as f:
        f.write("\n" + text)
    return rules
