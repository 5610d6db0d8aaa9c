"""Pricing of aggregates: exact totals per invoice line, refused straddles, order independence.

Rules: the example set `billing_rules/examples/tou/` (site gz-tou, Asia/Shanghai = UTC+8):
weekday bands valley 00–08 ¥0.25, peak 08–22 ¥0.35, valley 22–24 ¥0.25 until
2026-04-15 12:00 local (04:00Z), then valley 00–09 ¥0.24, peak 09–21 ¥0.34, valley 21–24;
PUE 1.12; RTX4090 hourly ¥1.25 → ¥1.20 at the same instant; A800 hourly ¥10.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from billing_rules import RuleSet, load_rules
from billing_rules.aggregate import (
    AggregateColumns,
    AggregateStraddlesPrice,
    InvalidAggregate,
    aggregation_buckets,
    price_aggregates,
    segment_edges,
)
from gpubill.bench.pricing import EXAMPLE_TOU_DIR, bench_pricing, fleet_month

RULES = load_rules(EXAMPLE_TOU_DIR)
H = 3600
MJ_PER_KWH = 3_600_000_000


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


NOON_15 = utc("2026-04-15T04:00:00")  # 12:00 local on Wednesday 15 April 2026


def row(tenant, gpu, model, start, end, seconds, energy_mj):  # noqa: ANN001, ANN201 - table helper
    return (tenant, "inst-1", gpu, model, "gz-tou", start, end, seconds, energy_mj)


def test_hand_worked_hours_either_side_of_the_noon_change() -> None:
    rows = [
        # A800 at 857 W: 857 000 mW × 3600 s = 3 085 200 000 mJ per hour
        row("tenant-9", "GPU-a", "A800-80G", NOON_15 - H, NOON_15, 3600, 3_085_200_000),
        row("tenant-9", "GPU-a", "A800-80G", NOON_15, NOON_15 + H, 3600, 3_085_200_000),
        # RTX 4090 at 203 W: 730 800 000 mJ per hour
        row("tenant-9", "GPU-b", "RTX4090", NOON_15 - H, NOON_15, 3600, 730_800_000),
        row("tenant-9", "GPU-b", "RTX4090", NOON_15, NOON_15 + H, 3600, 730_800_000),
    ]
    priced = price_aggregates(RULES, AggregateColumns.from_rows(rows))
    rent = [(t.gpu_model, t.rate.plan, t.rate.price, t.seconds, t.amount) for t in priced.rent]
    assert rent == [
        ("A800-80G", "hourly", Decimal("10.00"), 7200, Fraction(20)),  # 2 h × ¥10
        ("RTX4090", "hourly", Decimal("1.20"), 3600, Fraction("1.20")),  # after 12:00
        ("RTX4090", "hourly", Decimal("1.25"), 3600, Fraction("1.25")),  # before 12:00
    ]
    energy = [(t.rate.band, t.rate.tariff_per_kwh, t.energy_mj, t.billed_kwh, t.amount) for t in priced.energy]
    assert energy == [
        # 11:00–12:00: 3 816 000 000 mJ = 1.06 kWh × 1.12 = 1.1872 kWh × ¥0.34 / ¥0.35
        ("peak", Decimal("0.34"), 3_816_000_000, Fraction("1.1872"), Fraction("0.403648")),
        ("peak", Decimal("0.35"), 3_816_000_000, Fraction("1.1872"), Fraction("0.41552")),
    ]
    assert {(t.tenant, t.period) for t in (*priced.rent, *priced.energy)} == {("tenant-9", "2026-04")}
    assert priced.gpu_seconds == 4 * 3600
    usage = priced.rent_usages("tenant-9", "2026-04")[0]
    assert (usage.gpu_model, usage.plan, usage.price, usage.per_s, usage.seconds) == ("A800-80G", "hourly", Decimal("10.00"), 3600, 7200)
    assert priced.energy_usages("tenant-9", "2026-04")[0].energy_mj == 3_816_000_000


def test_unrented_energy_is_unallocated_and_not_rent() -> None:
    rows = [row(None, "GPU-c", "A800-80G", NOON_15, NOON_15 + H, 3600, 360_000_000)]  # 100 W idle
    priced = price_aggregates(RULES, AggregateColumns.from_rows(rows))
    assert priced.rent == () and priced.gpu_seconds == 0
    (idle,) = priced.energy
    # 0.1 kWh × 1.12 × ¥0.34 = ¥0.03808
    assert (idle.tenant, idle.rate.band, idle.amount) == (None, "peak", Fraction("0.03808"))


def test_straddling_aggregate_is_refused_naming_it() -> None:
    rows = [row("tenant-9", "GPU-a", "A800-80G", NOON_15 - 1800, NOON_15 + 1800, 3600, 1)]
    with pytest.raises(AggregateStraddlesPrice) as caught:
        price_aggregates(RULES, AggregateColumns.from_rows(rows))
    message = str(caught.value)
    assert "aggregate #0 (tenant=tenant-9, instance=inst-1, gpu=GPU-a, model=A800-80G, site=gz-tou" in message
    assert "2026-04-15T03:30:00Z–2026-04-15T04:30:00Z" in message
    assert "boundary at 2026-04-15T04:00:00Z (2026-04-15T12:00:00+08:00)" in message
    assert isinstance(caught.value, ValueError)


def test_aggregate_across_a_period_edge_is_refused() -> None:
    may_1 = utc("2026-04-30T16:00:00")  # 1 May 00:00 local; also a holiday, but a period edge first
    rows = [row("tenant-9", "GPU-a", "A800-80G", may_1 - 60, may_1 + 60, 120, 0)]
    with pytest.raises(AggregateStraddlesPrice, match="boundary at 2026-04-30T16:00:00Z"):
        price_aggregates(RULES, AggregateColumns.from_rows(rows))


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([row("t", "g", "A800-80G", NOON_15, NOON_15, 0, 0)], "the interval must end after it starts"),
        ([row("t", "g", "A800-80G", NOON_15, NOON_15 + 1, -1, 0)], "seconds must be ≥ 0, got -1"),
        ([row("t", "g", "A800-80G", NOON_15, NOON_15 + 1, 1, -5)], "energy_mj must be ≥ 0, got -5"),
    ],
)
def test_invalid_aggregates(rows: list, message: str) -> None:
    with pytest.raises(InvalidAggregate, match=message):
        price_aggregates(RULES, AggregateColumns.from_rows(rows))


def test_columns_of_unequal_length() -> None:
    columns = AggregateColumns(["t"], ["i"], ["g"], ["A800-80G"], ["gz-tou"], [0], [1], [1], [])
    with pytest.raises(InvalidAggregate, match="column energy_mj has 0 rows, start_s has 1"):
        price_aggregates(RULES, columns)


def oracle(rules: RuleSet, columns: AggregateColumns) -> tuple[dict, dict]:
    """Per-row pricing with the per-second lookups, grouped per line: the slow, obvious way."""
    rent: dict = {}
    energy: dict = {}
    for tenant, _, _, model, site, start, _, seconds, mj in zip(*(getattr(columns, f) for f in columns.__slots__)):
        period = rules.period_of(start)
        if tenant is not None and seconds:
            r = rules.rent_rate(tenant, model, start)
            rent[tenant, period, model, r] = rent.get((tenant, period, model, r), 0) + seconds * Fraction(r.price) / r.per_s
        e = rules.energy_rate(site, start)
        energy[tenant, period, site, e] = energy.get((tenant, period, site, e), 0) + e.cost(mj)
    return rent, energy


def as_dicts(priced) -> tuple[dict, dict]:  # noqa: ANN001
    rent = {(t.tenant, t.period, t.gpu_model, t.rate): t.amount for t in priced.rent}
    energy = {(t.tenant, t.period, t.site, t.rate): t.amount for t in priced.energy if t.amount}
    return rent, energy


def test_a_fleet_month_matches_per_row_pricing_and_any_row_order() -> None:
    columns = fleet_month(RULES, 40, tenants=3)  # 40 cards, 720 hourly buckets each
    priced = price_aggregates(RULES, columns)
    assert as_dicts(priced) == oracle(RULES, columns)
    assert priced.gpu_seconds == 40 * 30 * 86_400  # every card rented all of April
    # the same rows shuffled take the regrouping path and give the same totals
    rows = list(zip(*(getattr(columns, f) for f in columns.__slots__)))
    random.Random(7).shuffle(rows)
    assert price_aggregates(RULES, AggregateColumns.from_rows(rows)) == priced


def test_buckets_are_the_hour_grid_cut_at_price_boundaries() -> None:
    start, end = NOON_15 - 2 * H, NOON_15 + H  # 10:00–13:00 local, peak throughout
    assert segment_edges(RULES, start, end, site="gz-tou") == [start, NOON_15, end]
    assert aggregation_buckets(RULES, start, end, site="gz-tou") == [
        (start, start + H), (start + H, NOON_15), (NOON_15, end),
    ]
    # 30-minute buckets from 20:30 local on the 15th: the new peak ends at 21:00 local
    nine_pm = utc("2026-04-15T13:00:00")
    assert aggregation_buckets(RULES, nine_pm - 1800, nine_pm + 1800, step_s=1800, site="gz-tou") == [
        (nine_pm - 1800, nine_pm), (nine_pm, nine_pm + 1800),
    ]
    assert aggregation_buckets(RULES, nine_pm - 1800, nine_pm + 600, site="gz-tou") == [
        (nine_pm - 1800, nine_pm), (nine_pm, nine_pm + 600),
    ]


@settings(max_examples=40, deadline=None)
@given(
    hours=st.integers(1, 72),
    first=st.integers(0, 29 * 24 - 72),
    cut=st.integers(0, 10**6),
    power_mw=st.integers(0, 1_500_000),
)
def test_pricing_is_additive_over_any_split(hours: int, first: int, cut: int, power_mw: int) -> None:
    # one card at constant power over whole buckets; cutting one bucket in two at any
    # second (seconds and energy split in proportion) changes no exact total
    start = RULES.period_bounds("2026-04")[0] + first * H
    buckets = aggregation_buckets(RULES, start, start + hours * H, site="gz-tou", tenant="tenant-0", gpu_model="RTX4090")
    whole = [row("tenant-0", "g", "RTX4090", a, b, b - a, power_mw * (b - a)) for a, b in buckets]
    a, b = buckets[cut % len(buckets)]
    middle = a + 1 + cut % (b - a) if b - a > 1 else b
    split = [r for r in whole if r[5] != a]
    split += [row("tenant-0", "g", "RTX4090", x, y, y - x, power_mw * (y - x)) for x, y in ((a, middle), (middle, b)) if y > x]
    split.sort(key=lambda r: r[5])
    one, two = (price_aggregates(RULES, AggregateColumns.from_rows(rows)) for rows in (whole, split))
    assert [(t.rate, t.seconds, t.amount) for t in one.rent] == [(t.rate, t.seconds, t.amount) for t in two.rent]
    assert [(t.rate, t.amount) for t in one.energy] == [(t.rate, t.amount) for t in two.energy]


def test_bench_pricing_reports_what_it_priced() -> None:
    result = bench_pricing(RULES, cards=16)
    assert set(result) == {"gpu_seconds", "seconds", "gpu_seconds_per_s"}
    assert result["gpu_seconds"] == 16 * 30 * 86_400  # April 2026 has 30 days
    assert result["seconds"] > 0 and result["gpu_seconds_per_s"] == result["gpu_seconds"] / result["seconds"]
