"""The rating worker's side of live spend: per owned partition and tenant, the cumulative
quantities and the marks that make a replay count once (schemas/spend.py, docs/balances.md).

    load(records, partitions)   after an assignment: what the topic holds for these partitions
    filter_marks                the marks as loaded, for the rater: a contribution caused by a
                                reading below them was counted by a predecessor (constant
                                until the next load, see below)
    apply(spend, positions, …)  after a batch is written to ClickHouse: add its contributions,
                                return the rounds to produce — one per (source partition,
                                spend partition) the batch changed, carrying every tenant of
                                that spend partition held for the source (schemas/spend.py)

Why the rater filters with the marks *as loaded*, not the marks this worker produces since:
a reading the predecessor counted may be re-read later than its counterpart on the other
topic, and the join of the two must count exactly when it did not before — which only the
predecessor's marks tell (streams/rating/protocol.py `SpendMarks`).

Why a round's marks are max(loaded marks, positions consumed by this worker): every
contribution caused below them was produced — by a predecessor (below the loaded marks) or
by this worker (it rated everything it consumed, re-reads included) — and none above. That
holds for every tenant of the round, changed by the batch or not, and for a tenant new to
it (the predecessor's round, complete to its marks, had nothing of it).
Because the worker writes a batch to ClickHouse before producing its spend, a reading found
in ClickHouse when it is re-read may still be uncounted; the rater counts such a re-read
once (a "replay"), subject to the loaded marks.

Not thread-safe by design: `apply` runs in the writer thread, in batch order; `load` and
`forget` on the event loop while no batch is in flight (a rebalance flushes first).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Iterable

from billing_rules.spend import EnergyTerms, PeriodSpend, RentTerms
from schemas.spend import Periods, SpendRecord, SpendRound, spend_partition
from schemas.topics import TOPIC_POWER, TOPIC_USAGE

KEEP_PERIODS = 3  # the current period, the one being invoiced, and one more for late data


@dataclass
class _Entry:
    periods: dict[str, PeriodSpend] = field(default_factory=dict)
    wire: Periods | None = None  # `periods` as a round carries them; None: changed since


@dataclass
class SpendLedger:
    """Cumulative spend per (tenant, source partition) of the partitions this worker owns,
    grouped as the rounds carry it: per (source partition, spend partition)."""

    partitions: int = 8  # of the spend topic (settings.partitions)
    usage_topic: str = TOPIC_USAGE
    power_topic: str = TOPIC_POWER
    filter_marks: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    _entries: dict[tuple[str, int], _Entry] = field(default_factory=dict)
    _groups: dict[tuple[int, int], dict[str, _Entry]] = field(default_factory=dict)  # (source, spend p) → tenants
    _marks: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # per group, as last produced
    _consumed: dict[int, list[int]] = field(default_factory=dict)

    def load(self, rounds: Iterable[SpendRound], partitions: Iterable[int]) -> int:
        """Take over source `partitions` with the latest round of each key from the topic;
        returns how many tenant entries were loaded. Replaces whatever was held."""
        owned = set(partitions)
        self.forget()
        for spend_round in rounds:
            if spend_round.partition not in owned:
                continue
            for record in spend_round.records():
                self._entry(record.tenant, record.partition).periods.update(periods_of(record))
                self.filter_marks[(record.tenant, record.partition)] = spend_round.marks
                group = (record.partition, spend_partition(record.tenant, self.partitions))
                held = self._marks.get(group, (0, 0))
                self._marks[group] = (max(held[0], spend_round.marks[0]), max(held[1], spend_round.marks[1]))
        return len(self._entries)

    def forget(self) -> None:
        """Drop everything (partitions revoked: their next owner loads them from the topic)."""
        self._entries, self._groups, self._marks, self._consumed, self.filter_marks = {}, {}, {}, {}, {}

    def apply(self, spend, positions: dict[tuple[str, int], int], *, oldest_ms: int = 0,
              now_ms: int = 0) -> list[SpendRound]:
        """Add a written batch's contributions (`BatchResult.spend`) and return a round for
        every (source partition, spend partition) it changed, marked with what has been
        consumed so far."""
        for (topic, partition), next_offset in positions.items():
            side = 0 if topic == self.usage_topic else 1 if topic == self.power_topic else None
            if side is not None:
                consumed = self._consumed.setdefault(partition, [0, 0])
                consumed[side] = max(consumed[side], next_offset)
        if spend is None:
            return []
        touched: set[tuple[int, int]] = set()
        for (tenant, partition, period, model, plan, price, per_s, pct), seconds in spend.rent.items():
            if seconds:
                terms = RentTerms(model, plan, price, per_s, pct)
                rent = self._period(tenant, partition, period, touched).rent_s
                rent[terms] = rent.get(terms, 0) + seconds
        for (tenant, partition, period, site, band, tariff, pue), mj in spend.energy.items():
            if mj:
                terms = EnergyTerms(site, band, tariff, pue)
                energy = self._period(tenant, partition, period, touched).energy_mj
                energy[terms] = energy.get(terms, 0) + mj
        rounds = []
        for group in sorted(touched):
            consumed = self._consumed.get(group[0], [0, 0])
            held = self._marks.get(group, (0, 0))
            marks = self._marks[group] = (max(held[0], consumed[0]), max(held[1], consumed[1]))
            tenants = {}
            for tenant, entry in self._groups[group].items():
                if entry.wire is None:
                    for stale in sorted(entry.periods)[:-KEEP_PERIODS]:
                        del entry.periods[stale]
                    entry.wire = _wire(entry.periods)
                tenants[tenant] = entry.wire
            rounds.append(SpendRound(group[0], group[1], marks, tenants, oldest_ms, now_ms))
        return rounds

    def totals(self) -> dict[tuple[str, int], dict[str, PeriodSpend]]:
        """A copy of what is held (tests, the benchmark)."""
        return {key: {p: s.copy() for p, s in entry.periods.items()} for key, entry in self._entries.items()}

    def _entry(self, tenant: str, partition: int) -> _Entry:
        entry = self._entries.get((tenant, partition))
        if entry is None:
            entry = self._entries[(tenant, partition)] = _Entry()
            group = (partition, spend_partition(tenant, self.partitions))
            self._groups.setdefault(group, {})[tenant] = entry
        return entry

    def _period(self, tenant: str, partition: int, period: str, touched: set[tuple[int, int]]) -> PeriodSpend:
        entry = self._entry(tenant, partition)
        entry.wire = None
        touched.add((partition, spend_partition(tenant, self.partitions)))
        spend = entry.periods.get(period)
        if spend is None:
            spend = entry.periods[period] = PeriodSpend()
        return spend


def _wire(periods: dict[str, PeriodSpend]) -> Periods:
    """A tenant's quantities as a round carries them (sorted: the encoding is canonical)."""
    wire = {}
    for period, spend in sorted(periods.items()):
        rent = tuple((t.gpu_model, t.plan, t.list_price, t.per_s, t.discount_pct, s)
                     for t, s in sorted(spend.rent_s.items()) if s)
        energy = tuple((t.site, t.band, t.tariff_per_kwh, t.pue, mj) for t, mj in sorted(spend.energy_mj.items()) if mj)
        wire[period] = (rent, energy)
    return wire


def periods_of(record: SpendRecord) -> dict[str, PeriodSpend]:
    """The quantities of a tenant's part of a round, as the ledger and the tracker hold them."""
    periods = {}
    for period, (rent, energy) in record.periods.items():
        spend = PeriodSpend()
        for model, plan, price, per_s, pct, seconds in rent:
            terms = RentTerms(model, plan, Decimal(price), per_s, Decimal(pct))
            spend.rent_s[terms] = spend.rent_s.get(terms, 0) + seconds
        for site, band, tariff, pue, mj in energy:
            terms = EnergyTerms(site, band, Decimal(tariff), Decimal(pue))
            spend.energy_mj[terms] = spend.energy_mj.get(terms, 0) + mj
        periods[period] = spend
    return periods
