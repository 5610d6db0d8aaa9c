"""Billing periods: calendar months in the billing time zone, as "YYYY-MM".

Pure calendar arithmetic on UTC epoch seconds; the time zone is passed in. A period
covers the epoch seconds [start, end) where start and end are local midnights of the
first days of this month and the next.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time
from functools import lru_cache
from zoneinfo import ZoneInfo

from billing_rules.errors import InvalidPeriod

_PERIOD = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")


def parse_period(period: str) -> tuple[int, int]:
    """(year, month) of "YYYY-MM"; raises InvalidPeriod for anything else."""
    match = _PERIOD.fullmatch(period) if isinstance(period, str) else None
    if match is None:
        raise InvalidPeriod(f"billing period must be YYYY-MM, got {period!r}")
    return int(match[1]), int(match[2])


def format_period(year: int, month: int) -> str:
    return f"{year:04d}-{month:02d}"


def period_of(second: int, tz: ZoneInfo) -> str:
    """The period containing UTC epoch second `second`, in time zone `tz`."""
    # Every UTC offset in use since 1972 is a whole number of quarter hours, so local midnights (and so
    # period edges) fall on multiples of 900 s: the period of a quarter hour is one lookup.
    return _period_of_quarter(second // 900, tz)


@lru_cache(maxsize=1 << 14)
def _period_of_quarter(quarter: int, tz: ZoneInfo) -> str:
    local = datetime.fromtimestamp(quarter * 900, tz)
    return format_period(local.year, local.month)


def next_period(period: str) -> str:
    year, month = parse_period(period)
    return format_period(year + month // 12, month % 12 + 1)


def previous_period(period: str) -> str:
    year, month = parse_period(period)
    return format_period(year - (month == 1), (month - 2) % 12 + 1)


def local_midnight(day: date, tz: ZoneInfo) -> int:
    """Epoch second of the first instant of `day` in `tz`.

    Where a DST change skips midnight, zoneinfo (fold=0) maps it to the transition
    instant, which is the first instant of that day.
    """
    return int(datetime.combine(day, time(0), tz).timestamp())


@lru_cache(maxsize=4096)
def period_bounds(period: str, tz: ZoneInfo) -> tuple[int, int]:
    """[start, end) in UTC epoch seconds of `period` in `tz`."""
    year, month = parse_period(period)
    next_year, next_month = parse_period(next_period(period))
    return local_midnight(date(year, month, 1), tz), local_midnight(date(next_year, next_month, 1), tz)
