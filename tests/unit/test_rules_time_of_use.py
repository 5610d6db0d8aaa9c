"""Rules that change at a time of day, time-of-use calendars, DST, and rate segments.

Every expected value is worked by hand in the comments. Instants are written as UTC
("2026-03-15T04:00:00" with `utc()`); Asia/Shanghai is UTC+8 all year, Europe/Berlin is
UTC+1 (CET) and UTC+2 (CEST) from 2026-03-29 01:00Z to 2026-10-25 01:00Z.

Longer than 400 lines on purpose: tables of hand-worked cases around one rule file
fixture; splitting them would split the fixture's explanation from its cases.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_rules import DEFAULT_RULES_DIR, NoRuleInForce, RuleSet, load_rules

MJ_PER_KWH = 3_600_000_000
H = 3600


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


SITES = """
# Shanghai site whose PUE and tariff both change at 12:00 local on 15 March 2026.
[site.gz-noon]
name = "Gui'an hall 3"
timezone = "Asia/Shanghai"
green_share = 0.85

[[site.gz-noon.pue]]
effective_from = 2026-01-01
pue = 1.12

[[site.gz-noon.pue]]
effective_from = 2026-03-15T12:00:00
pue = 1.10

[[site.gz-noon.tariff]]
effective_from = 2026-01-01
bands = [
  { name = "valley", start = "00:00", end = "08:00", price_per_kwh = 0.25 },
  { name = "peak",   start = "08:00", end = "22:00", price_per_kwh = 0.35 },
  { name = "valley", start = "22:00", end = "24:00", price_per_kwh = 0.25 },
]

[[site.gz-noon.tariff]]
effective_from = 2026-03-15T12:00:00
bands = [{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.30 }]

# Shanghai site with a weekday / weekend / holiday calendar.
[site.gz-cal]
name = "Gui'an hall 4"
timezone = "Asia/Shanghai"
green_share = 0.85

[[site.gz-cal.pue]]
effective_from = 2026-01-01
pue = 1.12

[[site.gz-cal.tariff]]
effective_from = 2026-01-01
bands = [
  { name = "valley", start = "00:00", end = "08:00", price_per_kwh = 0.25 },
  { name = "peak",   start = "08:00", end = "22:00", price_per_kwh = 0.35 },
  { name = "valley", start = "22:00", end = "24:00", price_per_kwh = 0.25 },
]
weekend_bands = [
  { name = "valley",  start = "00:00", end = "08:00", price_per_kwh = 0.25 },
  { name = "weekend", start = "08:00", end = "24:00", price_per_kwh = 0.30 },
]
holidays = [2026-04-04, 2026-04-06]
holiday_bands = [{ name = "holiday", start = "00:00", end = "24:00", price_per_kwh = 0.20 }]

# Like gz-cal without holiday_bands: holidays are priced like weekends.
[site.gz-cal2]
name = "Gui'an hall 5"
timezone = "Asia/Shanghai"
green_share = 0.85

[[site.gz-cal2.pue]]
effective_from = 2026-01-01
pue = 1.12

[[site.gz-cal2.tariff]]
effective_from = 2026-01-01
bands = [{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 0.33 }]
weekend_bands = [{ name = "weekend", start = "00:00", end = "24:00", price_per_kwh = 0.28 }]
holidays = [2026-04-06]

# A site in a zone with daylight saving time; the band edge 02:30 is inside the hour
# that is skipped in March and repeated in October.
[site.de-fra]
name = "Frankfurt"
timezone = "Europe/Berlin"
green_share = 0.50

[[site.de-fra.pue]]
effective_from = 2026-01-01
pue = 1.20

[[site.de-fra.tariff]]
effective_from = 2026-01-01
bands = [
  { name = "night", start = "00:00", end = "02:30", price_per_kwh = 0.20 },
  { name = "day",   start = "02:30", end = "24:00", price_per_kwh = 0.30 },
]
"""

CATALOG = """
[model.L40S]
name = "NVIDIA L40S"

[[model.L40S.price]]
effective_from = 2026-01-01
monthly = 1500
hourly = 3

[[model.L40S.price]]
effective_from = 2026-03-10T12:00:00
monthly = 1400
hourly = 2.8
"""

CONTRACTS = """
[tenant.lab]

[[tenant.lab.rent]]
gpu_model = "L40S"
plan = "monthly"
effective_from = 2026-03-20T18:30:00
"""


def _rules(tmp_path: Path) -> RuleSet:
    rules = tmp_path / "rules"
    shutil.copytree(DEFAULT_RULES_DIR, rules)
    for stem, text in (("sites", SITES), ("catalog", CATALOG), ("contracts", CONTRACTS)):
        with (rules / f"{stem}.toml").open("a", encoding="utf-8") as f:
            f.write("\n" + text)
    return load_rules(rules)


@pytest.fixture(scope="module")
def rules(tmp_path_factory: pytest.TempPathFactory) -> RuleSet:
    return _rules(tmp_path_factory.mktemp("tou"))


def bands_of(segments: list) -> list[tuple[str, str, str, str, str]]:
    """Segments as (start UTC, end UTC, band, tariff, pue) strings, for readable tables."""
    fmt = "%m-%dT%H:%M"
    return [
        (
            datetime.fromtimestamp(a, UTC).strftime(fmt),
            datetime.fromtimestamp(b, UTC).strftime(fmt),
            r.band,
            str(r.tariff_per_kwh),
            str(r.pue),
        )
        for a, b, r in segments
    ]


# a change at 12:00 on the 15th ------------------------------------------------------------


def test_tariff_and_pue_change_at_noon_segments(rules: RuleSet) -> None:
    # local day 15 March = [14T16:00Z, 15T16:00Z); 12:00 local = 04:00Z
    day = rules.energy_segments("gz-noon", utc("2026-03-14T16:00:00"), utc("2026-03-15T16:00:00"))
    assert bands_of(day) == [
        ("03-14T16:00", "03-15T00:00", "valley", "0.25", "1.12"),  # 00:00–08:00 local
        ("03-15T00:00", "03-15T04:00", "peak", "0.35", "1.12"),  # 08:00–12:00
        ("03-15T04:00", "03-15T16:00", "flat", "0.30", "1.10"),  # 12:00–24:00, new tariff and PUE
    ]


@pytest.mark.parametrize(
    ("instant", "band", "tariff", "pue"),
    [
        ("2026-03-15T03:59:59", "peak", "0.35", "1.12"),  # 11:59:59 local
        ("2026-03-15T04:00:00", "flat", "0.30", "1.10"),  # 12:00:00 local
        ("2026-03-14T15:59:59", "valley", "0.25", "1.12"),  # 14 March 23:59:59
        ("2026-03-15T15:59:59", "flat", "0.30", "1.10"),  # 15 March 23:59:59
        ("2026-03-16T00:00:00", "flat", "0.30", "1.10"),  # 16 March 08:00: one band now
    ],
)
def test_per_second_rate_either_side_of_noon(rules: RuleSet, instant: str, band: str, tariff: str, pue: str) -> None:
    rate = rules.energy_rate("gz-noon", utc(instant))
    assert (rate.band, rate.tariff_per_kwh, rate.pue) == (band, Decimal(tariff), Decimal(pue))


def test_cache_is_right_on_the_day_of_a_change(rules: RuleSet) -> None:
    # every minute of the change day, asked in scrambled order, agrees with the segments
    start, end = utc("2026-03-14T16:00:00"), utc("2026-03-15T16:00:00")
    segments = rules.energy_segments("gz-noon", start, end)
    for second in sorted(range(start, end, 60), key=lambda s: (s * 7919) % 1_000_003):
        expected = next(r for a, b, r in segments if a <= second < b)
        assert rules.energy_rate("gz-noon", second) == expected


def test_cost_of_the_change_day(rules: RuleSet) -> None:
    # 1 kW all day: valley 8 kWh × 1.12 × 0.25 = 2.24; peak 4 kWh × 1.12 × 0.35 = 1.568;
    # flat 12 kWh × 1.10 × 0.30 = 3.96; total ¥7.768
    segments = rules.energy_segments("gz-noon", utc("2026-03-14T16:00:00"), utc("2026-03-15T16:00:00"))
    cost = sum(r.cost(1_000_000 * (b - a)) for a, b, r in segments)
    assert cost == Fraction("7.768")


# rent changes at a time of day and at period edges ---------------------------------------


def test_price_change_mid_month_at_noon(rules: RuleSet) -> None:
    # L40S hourly ¥3 → ¥2.8 at 2026-03-10 12:00 local = 04:00Z; no contract: hourly
    mar_1, change, apr_1 = utc("2026-02-28T16:00:00"), utc("2026-03-10T04:00:00"), utc("2026-03-31T16:00:00")
    segments = rules.rent_segments("nobody", "L40S", mar_1, apr_1)
    assert [(a, b, r.plan, r.price, r.per_s) for a, b, r in segments] == [
        (mar_1, change, "hourly", Decimal(3), 3600),
        (change, apr_1, "hourly", Decimal("2.8"), 3600),
    ]
    assert rules.rent_rate("nobody", "L40S", change - 1).price == 3
    assert rules.rent_rate("nobody", "L40S", change).price == Decimal("2.8")
    # a whole March on demand: 9 d 12 h = 820 800 s × ¥3/3600 = ¥684;
    # the rest, 2 678 400 − 820 800 = 1 857 600 s × ¥2.8/3600 = ¥1444.8; total ¥2128.8
    assert change - mar_1 == 820_800
    assert sum((b - a) * r.per_second for a, b, r in segments) == Fraction("2128.8")


def test_contract_starting_at_a_time_of_day(rules: RuleSet) -> None:
    # lab turns monthly at 2026-03-20 18:30 local = 10:30Z, at the March catalog price ¥1400
    start = utc("2026-03-20T10:30:00")
    segments = rules.rent_segments("lab", "L40S", start - H, start + H)
    assert [(a, b, r.plan, r.price, r.per_s) for a, b, r in segments] == [
        (start - H, start, "hourly", Decimal("2.8"), 3600),
        (start, start + H, "monthly", Decimal(1400), 31 * 86_400),
    ]


def test_rent_segments_split_at_period_edges_february_vs_march(rules: RuleSet) -> None:
    # acme rents A800 monthly: Feb has 2 419 200 s, March 2 678 400 s; each month sums to ¥3180
    feb_1, mar_1, apr_1 = utc("2026-01-31T16:00:00"), utc("2026-02-28T16:00:00"), utc("2026-03-31T16:00:00")
    segments = rules.rent_segments("acme", "A800-80G", feb_1, apr_1)
    assert [(a, b, r.per_s) for a, b, r in segments] == [(feb_1, mar_1, 2_419_200), (mar_1, apr_1, 2_678_400)]
    assert [(b - a) * r.per_second for a, b, r in segments] == [3180, 3180]
    # an hourly tenant's rate does not change at the edge, the segments still split there
    hourly = rules.rent_segments("nobody", "A800-80G", mar_1 - H, mar_1 + H)
    assert [(a, b) for a, b, _ in hourly] == [(mar_1 - H, mar_1), (mar_1, mar_1 + H)]
    assert hourly[0][2] == hourly[1][2]


def test_segments_refuse_seconds_without_rules(rules: RuleSet) -> None:
    # L40S is priced from 2026-01-01 00:00 local = 2025-12-31T16:00Z
    with pytest.raises(NoRuleInForce, match="no price for L40S before 2026-01-01"):
        rules.rent_segments("nobody", "L40S", utc("2025-12-31T15:00:00"), utc("2025-12-31T17:00:00"))
    with pytest.raises(NoRuleInForce, match="site gz-noon before 2026-01-01"):
        rules.energy_segments("gz-noon", utc("2025-12-31T15:00:00"), utc("2025-12-31T17:00:00"))
    assert rules.rent_segments("nobody", "L40S", 5, 5) == []
    with pytest.raises(ValueError, match="end_s ≥ start_s"):
        rules.energy_segments("gz-noon", 10, 5)


def test_segments_start_where_a_price_changes_and_nowhere_else(rules: RuleSet) -> None:
    mar_1, apr_1 = utc("2026-02-28T16:00:00"), utc("2026-03-31T16:00:00")

    def inner_starts(segments: list) -> list[int]:
        return [a for a, _, _ in segments[1:]]

    # only the period edge (1 March 00:00 local) lies inside, for a tenant without contract
    assert inner_starts(rules.rent_segments("nobody", "A800-80G", mar_1 - H, mar_1 + H)) == [mar_1]
    # the L40S price change and the lab contract start, in March
    assert inner_starts(rules.rent_segments("lab", "L40S", mar_1, apr_1)) == [
        utc("2026-03-10T04:00:00"),
        utc("2026-03-20T10:30:00"),
    ]
    # gz-noon on 15 March: 08:00, 12:00 local; and 22:00 the day before
    assert inner_starts(rules.energy_segments("gz-noon", utc("2026-03-14T12:00:00"), utc("2026-03-15T12:00:00"))) == [
        utc("2026-03-14T14:00:00"),
        utc("2026-03-15T00:00:00"),
        utc("2026-03-15T04:00:00"),
    ]


# weekend and holiday calendars -----------------------------------------------------------


@pytest.mark.parametrize(
    ("site", "instant", "local", "band", "tariff"),
    [
        ("gz-cal", "2026-04-03T02:00:00", "Fri 10:00", "peak", "0.35"),
        ("gz-cal", "2026-04-03T15:59:59", "Fri 23:59:59", "valley", "0.25"),
        ("gz-cal", "2026-04-03T16:00:00", "Sat 00:00, holiday", "holiday", "0.20"),
        ("gz-cal", "2026-04-04T15:59:59", "Sat 23:59:59, holiday", "holiday", "0.20"),
        ("gz-cal", "2026-04-04T16:00:00", "Sun 00:00", "valley", "0.25"),
        ("gz-cal", "2026-04-05T02:00:00", "Sun 10:00", "weekend", "0.30"),
        ("gz-cal", "2026-04-06T02:00:00", "Mon 10:00, holiday", "holiday", "0.20"),
        ("gz-cal", "2026-04-07T02:00:00", "Tue 10:00", "peak", "0.35"),
        ("gz-cal", "2026-04-11T02:00:00", "Sat 10:00", "weekend", "0.30"),
        ("gz-cal2", "2026-04-06T02:00:00", "Mon 10:00, holiday: weekend bands", "weekend", "0.28"),
        ("gz-cal2", "2026-04-05T02:00:00", "Sun 10:00", "weekend", "0.28"),
        ("gz-cal2", "2026-04-07T02:00:00", "Tue 10:00", "flat", "0.33"),
    ],
)
def test_weekend_and_holiday_bands(rules: RuleSet, site: str, instant: str, local: str, band: str, tariff: str) -> None:
    rate = rules.energy_rate(site, utc(instant))
    assert (rate.band, rate.tariff_per_kwh) == (band, Decimal(tariff)), local


def test_calendar_segments_over_a_weekend(rules: RuleSet) -> None:
    # Thu 2 April 22:00 local .. Wed 8 April 00:00 local
    segments = rules.energy_segments("gz-cal", utc("2026-04-02T14:00:00"), utc("2026-04-07T16:00:00"))
    assert bands_of(segments) == [
        ("04-02T14:00", "04-03T00:00", "valley", "0.25", "1.12"),  # Thu 22:00 – Fri 08:00
        ("04-03T00:00", "04-03T14:00", "peak", "0.35", "1.12"),  # Fri 08:00 – 22:00
        ("04-03T14:00", "04-03T16:00", "valley", "0.25", "1.12"),  # Fri 22:00 – 24:00
        ("04-03T16:00", "04-04T16:00", "holiday", "0.20", "1.12"),  # Sat 4 April, a holiday
        ("04-04T16:00", "04-05T00:00", "valley", "0.25", "1.12"),  # Sun 00:00 – 08:00
        ("04-05T00:00", "04-05T16:00", "weekend", "0.30", "1.12"),  # Sun 08:00 – 24:00
        ("04-05T16:00", "04-06T16:00", "holiday", "0.20", "1.12"),  # Mon 6 April, a holiday
        ("04-06T16:00", "04-07T00:00", "valley", "0.25", "1.12"),  # Tue 00:00 – 08:00
        ("04-07T00:00", "04-07T14:00", "peak", "0.35", "1.12"),
        ("04-07T14:00", "04-07T16:00", "valley", "0.25", "1.12"),
    ]


def test_band_edges_at_local_midnight_merge_when_the_rate_is_equal(rules: RuleSet) -> None:
    # weekday valley 22:00–24:00 and the next weekday's valley 00:00–08:00 are one rate:
    # Tue 7 April 22:00 local (14:00Z) to Wed 08:00 (00:00Z) is a single 10 h segment
    segments = rules.energy_segments("gz-cal", utc("2026-04-07T12:00:00"), utc("2026-04-08T02:00:00"))
    assert bands_of(segments) == [
        ("04-07T12:00", "04-07T14:00", "peak", "0.35", "1.12"),
        ("04-07T14:00", "04-08T00:00", "valley", "0.25", "1.12"),
        ("04-08T00:00", "04-08T02:00", "peak", "0.35", "1.12"),
    ]


# daylight saving time -------------------------------------------------------------------


def test_dst_spring_forward_day_is_23_hours(rules: RuleSet) -> None:
    # Sun 29 March 2026 in Berlin: 00:00 CET = 28T23:00Z; at 01:00Z 02:00 CET becomes
    # 03:00 CEST, so 02:00–02:59 never happens and the night band (to 02:30) ends at the
    # jump; the day ends at 24:00 CEST = 29T22:00Z: 2 h night + 21 h day = 23 h
    segments = rules.energy_segments("de-fra", utc("2026-03-28T23:00:00"), utc("2026-03-29T22:00:00"))
    assert bands_of(segments) == [
        ("03-28T23:00", "03-29T01:00", "night", "0.20", "1.20"),
        ("03-29T01:00", "03-29T22:00", "day", "0.30", "1.20"),
    ]
    assert sum(b - a for a, b, _ in segments) == 23 * H


def test_dst_fall_back_day_is_25_hours(rules: RuleSet) -> None:
    # Sun 25 October 2026: 00:00 CEST = 24T22:00Z; 02:30 CEST = 00:30Z (night ends);
    # at 01:00Z 03:00 CEST becomes 02:00 CET: 02:00–02:30 again, night again until
    # 02:30 CET = 01:30Z; the day ends at 24:00 CET = 25T23:00Z
    segments = rules.energy_segments("de-fra", utc("2026-10-24T22:00:00"), utc("2026-10-25T23:00:00"))
    assert bands_of(segments) == [
        ("10-24T22:00", "10-25T00:30", "night", "0.20", "1.20"),  # 2.5 h
        ("10-25T00:30", "10-25T01:00", "day", "0.30", "1.20"),  # 0.5 h (02:30–03:00 CEST)
        ("10-25T01:00", "10-25T01:30", "night", "0.20", "1.20"),  # 0.5 h (02:00–02:30 CET)
        ("10-25T01:30", "10-25T23:00", "day", "0.30", "1.20"),  # 21.5 h
    ]
    assert sum(b - a for a, b, _ in segments) == 25 * H
    # 1 kW over the day: night 3 kWh × 1.2 × 0.20 = 0.72; day 22 kWh × 1.2 × 0.30 = 7.92
    assert sum(r.cost(1_000_000 * (b - a)) for a, b, r in segments) == Fraction("8.64")


@pytest.mark.parametrize(
    ("instant", "band"),
    [
        ("2026-03-29T00:59:59", "night"),  # 01:59:59 CET
        ("2026-03-29T01:00:00", "day"),  # 03:00:00 CEST
        ("2026-10-25T00:29:59", "night"),  # 02:29:59 CEST
        ("2026-10-25T00:30:00", "day"),  # 02:30:00 CEST
        ("2026-10-25T00:59:59", "day"),  # 02:59:59 CEST
        ("2026-10-25T01:00:00", "night"),  # 02:00:00 CET, the repeated hour
        ("2026-10-25T01:30:00", "day"),  # 02:30:00 CET
    ],
)
def test_dst_per_second(rules: RuleSet, instant: str, band: str) -> None:
    assert rules.energy_rate("de-fra", utc(instant)).band == band


# properties -------------------------------------------------------------------------------

BERLIN = ZoneInfo("Europe/Berlin")
SHANGHAI = ZoneInfo("Asia/Shanghai")
SPAN = (utc("2026-03-01T00:00:00"), utc("2026-11-01T00:00:00"))


def berlin_band(second: int) -> str:
    """The de-fra band from first principles: night while the wall clock reads < 02:30."""
    local = datetime.fromtimestamp(second, BERLIN)
    return "night" if (local.hour, local.minute) < (2, 30) else "day"


def cal_band(second: int) -> str:
    """The gz-cal band from first principles (Shanghai wall clock and calendar)."""
    local = datetime.fromtimestamp(second, SHANGHAI)
    minute = local.hour * 60 + local.minute
    if local.date().isoformat() in ("2026-04-04", "2026-04-06"):
        return "holiday"
    if minute < 8 * 60:
        return "valley"
    if local.weekday() >= 5:
        return "weekend"
    return "peak" if minute < 22 * 60 else "valley"


intervals = st.tuples(st.integers(*SPAN), st.integers(0, 9 * 86_400)).map(lambda t: (t[0], t[0] + t[1]))


@settings(max_examples=60, deadline=None)
@given(interval=intervals, probes=st.lists(st.integers(0, 10**9), min_size=1, max_size=20))
def test_segments_cover_exactly_and_match_first_principles(
    tmp_path_factory: pytest.TempPathFactory, interval: tuple[int, int], probes: list[int]
) -> None:
    rules = _shared_rules(tmp_path_factory)
    start, end = interval
    for site, oracle in (("de-fra", berlin_band), ("gz-cal", cal_band)):
        segments = rules.energy_segments(site, start, end)
        if start == end:
            assert segments == []
            continue
        # cover [start, end) exactly, in order, no overlap, no gap, nothing empty
        assert segments[0][0] == start and segments[-1][1] == end
        assert all(a < b for a, b, _ in segments)
        assert all(segments[i][1] == segments[i + 1][0] for i in range(len(segments) - 1))
        # maximal: neighbours differ
        assert all(segments[i][2] != segments[i + 1][2] for i in range(len(segments) - 1))
        for probe in probes:
            second = start + probe % (end - start)
            rate = next(r for a, b, r in segments if a <= second < b)
            assert rate.band == oracle(second)
            assert rules.energy_rate(site, second) == rate


@settings(max_examples=60, deadline=None)
@given(interval=intervals, cut=st.integers(0, 10**9), power_mw=st.integers(0, 2_000_000))
def test_pricing_is_additive_over_any_split(
    tmp_path_factory: pytest.TempPathFactory, interval: tuple[int, int], cut: int, power_mw: int
) -> None:
    rules = _shared_rules(tmp_path_factory)
    start, end = interval
    middle = start + cut % (end - start + 1)

    def energy_cost(a: int, b: int) -> Fraction:
        return sum((r.cost(power_mw * (y - x)) for x, y, r in rules.energy_segments("de-fra", a, b)), Fraction(0))

    def rent(a: int, b: int) -> Fraction:
        return sum(((y - x) * r.per_second for x, y, r in rules.rent_segments("lab", "L40S", a, b)), Fraction(0))

    assert energy_cost(start, end) == energy_cost(start, middle) + energy_cost(middle, end)
    assert rent(start, end) == rent(start, middle) + rent(middle, end)


_SHARED: dict[str, RuleSet] = {}


def _shared_rules(factory: pytest.TempPathFactory) -> RuleSet:
    if "rules" not in _SHARED:
        _SHARED["rules"] = _rules(factory.mktemp("tou-shared"))
    return _SHARED["rules"]
