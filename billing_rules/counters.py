"""Energy from the cards' own counters (SPEC §4): what each second of a card drew, exactly. Pure.

A power reading may carry the card's cumulative energy counter (`energy_mj`, NVML total
energy / DCGM field 156) and the counting run it belongs to (`energy_epoch`: boot and
driver load). The IT energy of the second a reading covers is then the counter's rise since
the card's previous reading — the counted reading with the greatest earlier second, whatever
it carries — when that reading

    carries a counter of the same epoch,  is at most MAX_GAP_S (10) seconds earlier,
    and the counter rose by 0 ≤ rise ≤ MAX_MJ_PER_S × gap (what 5,000 W can draw),

split evenly in whole mJ over the seconds it covers (prev.second+1 … second), the remainder
to the last. A second so covered is *measured*. Otherwise — a reset (the counter falls or
the epoch changes), a jump beyond any card's draw, a longer gap, no previous reading, or a
reading without a counter — the reading's own second falls back to its `power_w` × 1 s
(*estimated*) and the seconds between get nothing (as without counters: a lost reading
loses its second).

The definition is a function of the card's counted readings alone (`card_energy`), so a
late reading converges to the same result: the streaming raters (streams/rating/reference.py
and the Rust core, native/src/rate.rs) re-emit the seconds of the one or two intervals a
reading changes, each row with a version that grows with what is known (`rank`), and
re-rating (usage/regenerate.py) computes it for a card-hour from the stored readings.

Versions. The interval that covers a second only ever shrinks as readings arrive (a later
previous reading, or an earlier next one), so `rank` — higher for a shorter interval — orders
every row ever written for a second below the row of the final interval. A second whose
reading has no previous reading within MAX_GAP_S has rank 0, as every row had before
counters; rows of the same interval have the same content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MAX_GAP_S", "MAX_MJ_PER_S", "Sample", "Share", "card_energy", "covered", "rank", "rise"]

MAX_GAP_S = 10
MAX_MJ_PER_S = 5_000_000  # 5,000 W (SPEC §3's bound on power_w) for one second, in mJ
MAX_COUNTER_MJ = (1 << 63) - 1  # what a reading may carry (a signed 64-bit counter)


@dataclass(frozen=True, slots=True)
class Sample:
    """One counted power reading of a card: its second, its draw in whole mW, and its counter
    (`energy_mj`, `epoch`) — both None when the reading carries none."""

    second: int
    power_mw: int
    energy_mj: int | None = None
    epoch: str | None = None

    @property
    def counts(self) -> bool:
        return self.epoch is not None


@dataclass(frozen=True, slots=True)
class Share:
    """The energy of one second: `energy_mj` mJ, `measured` from the counter or estimated from
    power_w. A share of 0 mJ that is not measured withdraws what an interval since split by a
    late reading had given a second between two readings."""

    second: int
    energy_mj: int
    measured: bool


def rise(prev: Sample | None, cur: Sample) -> int | None:
    """The counter's rise from `prev` to `cur` when it measures the seconds between (module
    docstring), else None."""
    if prev is None or not (prev.counts and cur.counts) or prev.epoch != cur.epoch:
        return None
    gap = cur.second - prev.second
    if not 0 < gap <= MAX_GAP_S:
        return None
    delta = cur.energy_mj - prev.energy_mj
    if delta < 0 or delta > MAX_MJ_PER_S * gap:
        return None
    return delta


def rank(prev_second: int | None, second: int) -> int:
    """How much is known of a second covered by the interval (prev_second, second]: 0 without a
    previous reading within MAX_GAP_S, else MAX_GAP_S + 1 − gap (1 … 10; shorter is higher)."""
    if prev_second is None or second - prev_second > MAX_GAP_S:
        return 0
    return MAX_GAP_S + 1 - (second - prev_second)


def covered(prev: Sample | None, cur: Sample) -> list[Share]:
    """The shares of the seconds the reading `cur` covers given its previous reading `prev`:
    every second of (prev.second, cur.second] measured when the counter's rise may be used,
    else `cur`'s own second estimated. Oldest first; the last is `cur`'s own second."""
    delta = rise(prev, cur)
    if delta is None:
        return [Share(cur.second, cur.power_mw, False)]
    gap = cur.second - prev.second
    each, rest = divmod(delta, gap)
    return [Share(prev.second + i, each, True) for i in range(1, gap)] + [Share(cur.second, each + rest, True)]


def card_energy(samples: Iterable[Sample]) -> dict[int, Share]:
    """The definition, in batch: the share of every second of one card given all its counted
    power readings (one per second: the first in partition order). Seconds without a share
    drew nothing that is known."""
    shares: dict[int, Share] = {}
    prev = None
    for cur in sorted(samples, key=lambda sample: sample.second):
        if prev is not None and cur.second == prev.second:
            raise ValueError(f"two counted readings of one second: {cur.second}")
        for share in covered(prev, cur):
            shares[share.second] = share
        prev = cur
    return shares
