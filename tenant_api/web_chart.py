"""The geometry of the web page's chart: daily GPU-hours as bars, daily spend as a line.

Pure: days in, coordinates and labels out; ``templates/_chart.html`` draws them as an inline
SVG, so the chart needs no script, no network and no inline style (the page's CSP allows
neither). Coordinates are floats (pixels); every figure a person reads is a Decimal
written by :mod:`tenant_api.i18n`, so an axis label never shows a float's noise.

Each axis starts at 0 and ends at the first "nice" tick (1, 2 or 5 × 10^k) above the
largest value, with four intervals, so bars and the line share one grid.
"""

from __future__ import annotations

import calendar
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from tenant_api.i18n import money, number

WIDTH, HEIGHT = 760.0, 280.0
LEFT, RIGHT, TOP, BOTTOM = 56.0, 64.0, 16.0, 36.0
TICKS = 4


class Day(Protocol):
    day: str
    gpu_hours: Decimal
    spend: Decimal


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str  # the day's figures, for the tooltip and screen readers


@dataclass(frozen=True)
class Tick:
    y: float
    left: str
    right: str


@dataclass(frozen=True)
class DayLabel:
    x: float
    text: str


@dataclass(frozen=True)
class Chart:
    width: float
    height: float
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    bars: tuple[Bar, ...]
    line: str  # the spend polyline's points, "x,y x,y …"
    dots: tuple[tuple[float, float], ...]
    ticks: tuple[Tick, ...]
    days: tuple[DayLabel, ...]
    empty: bool
    rows: tuple[tuple[str, str, str], ...]  # day, GPU-hours, spend: the table under the chart


def nice_top(largest: Decimal) -> Decimal:
    """The smallest 1, 2 or 5 × 10^k × TICKS not below `largest` (1 for nothing to show)."""
    if largest <= 0:
        return Decimal(TICKS)
    step = largest / TICKS
    exponent = step.adjusted()
    for mantissa in (1, 2, 5, 10):
        candidate = Decimal(mantissa).scaleb(exponent)
        if candidate >= step:
            return candidate * TICKS
    raise AssertionError("unreachable: 10 × 10^k is always ≥ step")  # pragma: no cover


def period_days(period: str) -> list[str]:
    """Every day of a ``YYYY-MM`` period, ``YYYY-MM-DD``."""
    year, month = int(period[:4]), int(period[5:7])
    return [f"{period}-{d:02d}" for d in range(1, calendar.monthrange(year, month)[1] + 1)]


def _places(top: Decimal) -> int:
    """Decimals an axis label needs: none for a step of 5, one for 0.2, two for 0.05."""
    exponent = (top / TICKS).normalize().as_tuple().exponent
    return max(0, -exponent) if isinstance(exponent, int) else 0


def build_chart(period: str, daily: Sequence[Day], *, hours_word: str) -> Chart:
    """The chart of `period`: one slot per calendar day, days without usage left empty
    (`daily` may list them as zeros, as billing.current_usage.daily_usage does, or leave them out)."""
    by_day = {d.day: d for d in daily}
    days = period_days(period)
    zero = Decimal(0)
    hours = [by_day[d].gpu_hours if d in by_day else zero for d in days]
    spend = [by_day[d].spend if d in by_day else zero for d in days]
    top_h, top_s = nice_top(max(hours, default=zero)), nice_top(max(spend, default=zero))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / len(days)
    bars, points = [], []
    for i, (day, h, s) in enumerate(zip(days, hours, spend, strict=True)):
        bar_h = float(h / top_h) * plot_h
        x = LEFT + i * slot
        bars.append(Bar(x=round(x + slot * 0.18, 2), y=round(TOP + plot_h - bar_h, 2), width=round(slot * 0.64, 2),
                        height=round(bar_h, 2), label=f"{day}: {number(h)} {hours_word} · {money(s)}"))
        points.append((round(x + slot / 2, 2), round(TOP + plot_h - float(s / top_s) * plot_h, 2)))
    places_h, places_s = _places(top_h), _places(top_s)
    ticks = tuple(Tick(y=round(TOP + plot_h - plot_h * k / TICKS, 2),
                       left=number(top_h * k / TICKS, places_h),
                       right=money(top_s * k / TICKS) if places_s else f"¥{number(top_s * k / TICKS, 0)}")
                  for k in range(TICKS + 1))
    every = 1 if len(days) <= 10 else 5
    labels = tuple(DayLabel(x=round(LEFT + i * slot + slot / 2, 2), text=str(int(day[8:])))
                   for i, day in enumerate(days) if i == 0 or (i + 1) % every == 0)
    rows = tuple((d.day, number(d.gpu_hours), money(d.spend)) for d in sorted(daily, key=lambda d: d.day)
                 if d.gpu_hours > 0 or d.spend > 0)
    # the line stops at the last day with usage: later days of a running month are not zeros yet
    # (the days after it are in `daily` as zeros, or missing)
    last = max((i for i, (h, s) in enumerate(zip(hours, spend, strict=True)) if h > 0 or s > 0), default=-1)
    return Chart(width=WIDTH, height=HEIGHT, plot_left=LEFT, plot_right=WIDTH - RIGHT, plot_top=TOP,
                 plot_bottom=TOP + plot_h, bars=tuple(bars), line=" ".join(f"{x},{y}" for x, y in points[:last + 1]),
                 dots=tuple(p for p, s in zip(points, spend, strict=True) if s > 0), ticks=ticks, days=labels,
                 empty=not any(h > 0 or s > 0 for h, s in zip(hours, spend, strict=True)), rows=rows)
