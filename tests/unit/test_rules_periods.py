"""Billing periods: calendar months in Asia/Shanghai (UTC+8, no DST)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from billing_rules import DEFAULT_RULES_DIR, InvalidPeriod, load_rules

RULES = load_rules(DEFAULT_RULES_DIR)


def utc(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp())


@pytest.mark.parametrize(
    ("instant", "period"),
    [
        ("2026-03-31T15:59:59", "2026-03"),  # 23:59:59 on 31 March in Shanghai
        ("2026-03-31T16:00:00", "2026-04"),  # 00:00:00 on 1 April in Shanghai
        ("2026-03-31T16:30:00", "2026-04"),  # SPEC §5 example
        ("2026-02-28T15:59:59", "2026-02"),
        ("2026-02-28T16:00:00", "2026-03"),
        ("2025-12-31T16:00:00", "2026-01"),  # year turns over 8 h before UTC does
        ("2026-01-01T00:00:00", "2026-01"),
    ],
)
def test_period_of_month_edges(instant: str, period: str) -> None:
    assert RULES.period_of(utc(instant)) == period


@pytest.mark.parametrize(
    ("period", "start", "end", "seconds"),
    [
        # [local midnight 1st, local midnight 1st of next month) = UTC 16:00 the day before
        ("2026-02", "2026-01-31T16:00:00", "2026-02-28T16:00:00", 28 * 86_400),  # 2 419 200 s
        ("2026-03", "2026-02-28T16:00:00", "2026-03-31T16:00:00", 31 * 86_400),  # 2 678 400 s
        ("2026-04", "2026-03-31T16:00:00", "2026-04-30T16:00:00", 30 * 86_400),  # 2 592 000 s
        ("2028-02", "2028-01-31T16:00:00", "2028-02-29T16:00:00", 29 * 86_400),  # leap year
        ("2026-12", "2026-11-30T16:00:00", "2026-12-31T16:00:00", 31 * 86_400),
    ],
)
def test_period_bounds(period: str, start: str, end: str, seconds: int) -> None:
    assert RULES.period_bounds(period) == (utc(start), utc(end))
    assert utc(end) - utc(start) == seconds


@pytest.mark.parametrize(("period", "following"), [("2026-03", "2026-04"), ("2026-12", "2027-01"), ("2027-01", "2027-02")])
def test_next_period(period: str, following: str) -> None:
    assert RULES.next_period(period) == following


@pytest.mark.parametrize("bad", ["2026-13", "2026-00", "2026-3", "202603", "", "2026-03-01"])
def test_bad_period_is_refused(bad: str) -> None:
    with pytest.raises(InvalidPeriod):
        RULES.period_bounds(bad)
    with pytest.raises(ValueError):  # InvalidPeriod is also a ValueError
        RULES.next_period(bad)
