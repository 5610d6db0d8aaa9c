"""Where in time a price may change: rule versions, local days and wall-clock edges. Pure.

Prices are piecewise constant in time. They can change only at
- the instant a rule version takes effect (`effective_from`, a local date = its 00:00,
  or a local date-time, converted once to a UTC epoch second);
- a local midnight (weekday/weekend/holiday calendars switch there);
- an instant where the local wall clock reads a band edge ("08:00"): on a day whose
  clock falls back that reading happens twice, on a day whose clock springs forward it
  may not happen at all, so both readings (fold 0 and 1) are candidates;
- an instant where the UTC offset changes (the wall clock jumps, possibly over an edge).

`RuleSet` collects these *candidate* instants for an interval, evaluates the rate at
each one and merges neighbours with equal rates. A spurious candidate therefore costs a
little time and never a wrong price; only a missing one could be wrong, which is why the
rules above err on the side of more candidates.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from billing_rules.periods import local_midnight

MINUTES_PER_DAY = 24 * 60
_ONE_DAY = timedelta(days=1)


def as_local_datetime(value: date | datetime) -> datetime:
    """A naive local date-time: a date stands for its 00:00."""
    return value if isinstance(value, datetime) else datetime.combine(value, time())


def label_of(value: date | datetime) -> str:
    """`effective_from` as written in TOML: "2026-03-15" or "2026-03-15T12:00:00"."""
    return value.isoformat()


def local_instant(value: date | datetime, tz: ZoneInfo) -> int:
    """UTC epoch second at which local `value` begins in `tz` (a date: its first instant).

    Uses fold=0: a midnight skipped by a DST change maps to the transition instant, which
    is the first instant of that day. The loader refuses local date-times that do not
    exist or happen twice, so for those no choice is made here.
    """
    if not isinstance(value, datetime):
        return local_midnight(value, tz)
    return int(value.replace(tzinfo=tz).timestamp())


def local_datetime_problem(value: datetime, tz: ZoneInfo) -> str | None:
    """Why local `value` is not one instant in `tz` ("does not exist", "happens twice"), or None."""
    first = value.replace(tzinfo=tz, fold=0)
    second = value.replace(tzinfo=tz, fold=1)
    if first.utcoffset() != second.utcoffset():
        back = datetime.fromtimestamp(first.timestamp(), tz).replace(tzinfo=None)
        return "does not exist (the clocks skip it)" if back != value else "happens twice (the clocks fall back)"
    return None


def minutes_of(clock: str) -> int:
    """Minutes after local midnight of "HH:MM" ("24:00" is 1440)."""
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


@dataclass(frozen=True, slots=True)
class Versions:
    """Versions of one entry, oldest first: `values[i]` is in force from epoch second `starts[i]`."""

    starts: tuple[int, ...]
    values: tuple[Any, ...]
    labels: tuple[str, ...]  # effective_from as written, for messages

    @classmethod
    def of(cls, items: Iterable[tuple[date | datetime, Any]], tz: ZoneInfo) -> Versions:
        pairs = list(items)
        return cls(
            starts=tuple(local_instant(when, tz) for when, _ in pairs),
            values=tuple(value for _, value in pairs),
            labels=tuple(label_of(when) for when, _ in pairs),
        )

    def index_at(self, second: int) -> int:
        """Index of the version in force at `second`; -1 before the first."""
        return bisect_right(self.starts, second) - 1

    def at(self, second: int) -> Any | None:
        i = bisect_right(self.starts, second) - 1
        return self.values[i] if i >= 0 else None

    def changes_in(self, start_s: int, end_s: int) -> list[int]:
        """Epoch seconds strictly inside (start_s, end_s) at which a version starts."""
        return list(self.starts[bisect_right(self.starts, start_s) : bisect_left(self.starts, end_s)])


@dataclass(frozen=True, slots=True)
class DayBands:
    """Tariff bands of one kind of local day, sorted by start minute; they cover the day once."""

    starts: tuple[int, ...]  # minutes after local midnight
    names: tuple[str, ...]
    prices: tuple[Decimal, ...]  # ¥ per kWh

    @classmethod
    def of(cls, bands: Iterable[Any]) -> DayBands:
        ordered = sorted(bands, key=lambda b: minutes_of(b.start))
        return cls(
            starts=tuple(minutes_of(b.start) for b in ordered),
            names=tuple(b.name for b in ordered),
            prices=tuple(b.price_per_kwh for b in ordered),
        )

    def index_at(self, minute: int) -> int:
        return bisect_right(self.starts, minute) - 1


@dataclass(frozen=True, slots=True)
class Tariff:
    """One tariff version of a site: bands for weekdays, weekends and holidays (local dates)."""

    weekday: DayBands
    weekend: DayBands
    holiday: DayBands
    holidays: frozenset[date]
    edge_minutes: tuple[int, ...]  # every band start of the three kinds, for candidate instants

    @classmethod
    def of(cls, version: Any) -> Tariff:
        weekday = DayBands.of(version.bands)
        weekend = DayBands.of(version.weekend_bands) if version.weekend_bands else weekday
        holiday = DayBands.of(version.holiday_bands) if version.holiday_bands else weekend
        edges = sorted(set(weekday.starts) | set(weekend.starts) | set(holiday.starts))
        return cls(weekday, weekend, holiday, frozenset(version.holidays), tuple(edges))

    def bands_on(self, day: date) -> DayBands:
        """Holiday bands on a listed holiday, weekend bands on Saturday and Sunday, else weekday bands."""
        if day in self.holidays:
            return self.holiday
        if day.weekday() >= 5:
            return self.weekend
        return self.weekday


def local_days(start_s: int, end_s: int, tz: ZoneInfo) -> Iterator[tuple[date, int, int]]:
    """(local date, first second, end second) of every local day that meets [start_s, end_s).

    A local day is 86 400 s long except on DST days (23 h or 25 h in Europe/Berlin).
    """
    day = datetime.fromtimestamp(start_s, tz).date()
    day_start = local_midnight(day, tz)
    while day_start < end_s:
        day_end = local_midnight(day + _ONE_DAY, tz)
        yield day, day_start, day_end
        day, day_start = day + _ONE_DAY, day_end


def offset_changes(start_s: int, end_s: int, tz: ZoneInfo) -> list[int]:
    """Instants in (start_s, end_s) at which `tz`'s UTC offset changes.

    Found by comparing the offsets at the ends and bisecting, so it finds every change of
    a day except a pair that cancels out within it (no zone in the tz database does that).
    """
    changes: list[int] = []
    lo, last = start_s, end_s - 1
    if last <= lo:
        return changes
    target = _offset(last, tz)
    while _offset(lo, tz) != target:
        # invariant: offset(lo) differs from offset(hi) ; find the first second with a new offset
        before, hi = _offset(lo, tz), last
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _offset(mid, tz) == before:
                lo = mid
            else:
                hi = mid
        changes.append(hi)
        lo = hi
    return changes


def wall_clock_instants(day: date, minutes: Iterable[int], tz: ZoneInfo, day_start: int, day_end: int) -> set[int]:
    """Instants in (day_start, day_end) of local `day` where the wall clock reads one of
    `minutes` (both readings on a day that falls back), plus the offset changes of the day."""
    found = set(offset_changes(day_start, day_end, tz))
    for minute in minutes:
        if minute <= 0 or minute >= MINUTES_PER_DAY:
            continue
        naive = datetime.combine(day, time(minute // 60, minute % 60))
        for fold in (0, 1):
            instant = int(naive.replace(tzinfo=tz, fold=fold).timestamp())
            if day_start < instant < day_end:
                found.add(instant)
    return found


def _offset(second: int, tz: ZoneInfo) -> timedelta | None:
    return datetime.fromtimestamp(second, tz).utcoffset()
