"""The tracker's logic, without Faust: fold spend rounds into the table, price a tenant's
month to date, and emit the billing events that are due, once (docs/balances.md).

    merge(value, round, raw)    the table value of the round's key (<source partition>/<spend
                                partition>) after a round: the latest, by its marks; an older
                                round is refused (None)
    spend_of(tenant, value_of)  the tenant's quantities: its part of each source partition's
                                round in its spend partition, summed
    evaluate(tenant, value_of)  the tenant's position now and the events it newly calls for

The table holds one entry per round key, not per tenant (schemas/spend.py): a round of a
thousand tenants is one event, one table write and one changelog record. A tenant is read
from the entries of its spend partition, one per source partition.

Once per (kind, tenant, period, threshold) across restarts, kill -9 and rebalances: the
conditions are levels, evaluated after every change, so an event missed by a crash before
its acknowledgement is emitted by whoever evaluates next; and before an event is produced
the events topic is read (EmittedEvents) for its id, so an event acknowledged before a
crash or a rebalance is not produced again. Evaluation and emission hold one lock: the
agent and the timer never race for the same event.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Awaitable, Callable, Iterable, Protocol

from billing_rules.spend import AlertPolicy, PeriodSpend, SpendContext, TenantPosition, due_events, position
from schemas.billing_events import BillingEvent, observed
from schemas.spend import SpendRecord, SpendRound, parse_round, round_key, spend_partition
from streams.spend.ledger import periods_of


class EventLog(Protocol):
    async def seen_all(self, ids: dict[int, set[str]]) -> set[str]: ...

    def emitted(self, event_id: str) -> None: ...


@dataclass
class SpendTracker:
    """What the tracker app's agent and timers share (one per process)."""

    partitions: int  # of the spend and events topics
    policy: AlertPolicy
    period_of: Callable[[int], str]
    events: EventLog
    produce: Callable[[BillingEvent, int], Awaitable[None]]  # returns once the broker acknowledged
    metrics: Any = None
    sources: int = 0  # partitions of the reading topics (0: as many as `partitions`)
    contexts: dict[str, SpendContext] = field(default_factory=dict)
    positions: dict[str, tuple[TenantPosition, int]] = field(default_factory=dict)  # tenant → (position, as of ms)
    freshness_s: deque = field(default_factory=lambda: deque(maxlen=100_000))
    transit_s: deque = field(default_factory=lambda: deque(maxlen=100_000))  # produced → applied
    consume_s: deque = field(default_factory=lambda: deque(maxlen=100_000))  # on the topic → applied
    exhausted_s: deque = field(default_factory=lambda: deque(maxlen=100_000))  # reading → balance_exhausted
    emitted_count: int = 0
    applied_count: int = 0
    _local: set[str] = field(default_factory=set)  # ids known to be on the topic
    _parsed: dict[str, tuple[str, SpendRound]] = field(default_factory=dict)  # round key → (raw, round)
    _spent: dict[tuple[str, str], tuple[SpendRound, dict[str, PeriodSpend]]] = field(default_factory=dict)
    _keys: set[str] = field(default_factory=set)  # round keys merged by this process
    dirty: set[str] = field(default_factory=set)  # tenants changed since they were last evaluated
    _oldest: dict[str, int] = field(default_factory=dict)  # tenant → oldest reading (ms) of its changes since
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    # -- the table ---------------------------------------------------------------------------

    def merge(self, value: dict | None, spend_round: SpendRound, raw: str) -> dict | None:
        """The table value of the round's key once `spend_round` is in, or None when it is older
        than what is held (a round replayed after a newer one, or a zombie's)."""
        key = spend_round.key
        held = (value or {}).get("round")
        if held is not None:
            marks = self._round(key, held).marks
            if spend_round.marks[0] < marks[0] or spend_round.marks[1] < marks[1]:
                return None
        self._parsed[key] = (raw, spend_round)
        self._keys.add(key)
        return {"round": raw}

    def spend_of(self, tenant: str, value_of: Callable[[str], dict | None]) -> dict[str, PeriodSpend]:
        """Per period, the tenant's quantities summed over the rounds of its spend partition."""
        own = spend_partition(tenant, self.partitions)
        keys = {round_key(source, own) for source in range(self.sources or self.partitions)}
        keys |= {key for key in self._keys if key.endswith(f"/{own}")}
        periods: dict[str, PeriodSpend] = {}
        for key in sorted(keys):
            value = value_of(key)
            if not value:
                continue
            spend_round = self._round(key, value["round"])
            if tenant not in spend_round.tenants:
                continue
            cached = self._spent.get((key, tenant))
            if cached is None or cached[0] is not spend_round:
                record = SpendRecord(tenant, spend_round.partition, spend_round.marks, spend_round.tenants[tenant])
                cached = self._spent[(key, tenant)] = (spend_round, periods_of(record))
            for period, spend in cached[1].items():
                periods.setdefault(period, PeriodSpend()).add(spend)
        return periods

    def _round(self, key: str, raw: str) -> SpendRound:
        """The round held under `key`, parsed once per value."""
        cached = self._parsed.get(key)
        if cached is None or cached[0] != raw:
            cached = self._parsed[key] = (raw, parse_round(raw.encode()))
        return cached[1]

    def changed(self, spend_round: SpendRound, oldest_ms: int | None = None) -> None:
        """The round's tenants are to be evaluated (the next `evaluate_dirty`); remember the
        oldest reading behind their change (`oldest_ms`, when older rounds it replaced bring
        older readings), for the time from a reading to its event."""
        self.dirty.update(spend_round.tenants)
        oldest = spend_round.oldest_ms if oldest_ms is None else oldest_ms
        if oldest:
            for tenant in spend_round.tenants:
                held = self._oldest.get(tenant)
                if held is None or oldest < held:
                    self._oldest[tenant] = oldest

    def observe(self, record: SpendRound, now_ms: int | None = None, sent_ms: int | None = None) -> float:
        """Record how fresh an applied round is: now − its batch's oldest reading, in s (and
        now − its Kafka timestamp `sent_ms`: how long it waited on the tracker's side)."""
        return self.observe_times(record.oldest_ms, record.produced_ms, now_ms, sent_ms)

    def observe_times(self, oldest_ms: int, produced_ms: int, now_ms: int | None = None,
                      sent_ms: int | None = None) -> float:
        """`observe` of a round known by its times alone (one a newer round replaced unread)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        if sent_ms:
            self.consume_s.append(max(now_ms - sent_ms, 0) / 1000)
        lag_s = max(now_ms - oldest_ms, 0) / 1000 if oldest_ms else 0.0
        self.freshness_s.append(lag_s)
        self.applied_count += 1
        if produced_ms:
            self.transit_s.append(max(now_ms - produced_ms, 0) / 1000)
        if self.metrics is not None:
            self.metrics.spend_freshness.observe(lag_s)
        return lag_s

    def report(self) -> dict:
        """Freshness percentiles (s) of the records applied so far and the events emitted
        (`gpubill bench spend` reads this from GPUBILL_BENCH_SPEND)."""
        def pick(values: deque, q: float) -> float | None:
            ordered = sorted(values)
            return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else None

        return {"records": len(self.freshness_s), "applied": self.applied_count,
                "freshness_p50_s": pick(self.freshness_s, 0.50),
                "freshness_p99_s": pick(self.freshness_s, 0.99), "transit_p50_s": pick(self.transit_s, 0.50),
                "transit_p99_s": pick(self.transit_s, 0.99), "consume_p50_s": pick(self.consume_s, 0.50),
                "consume_p99_s": pick(self.consume_s, 0.99), "events_emitted": self.emitted_count,
                "exhausted_events": len(self.exhausted_s), "exhausted_p50_s": pick(self.exhausted_s, 0.50),
                "exhausted_p99_s": pick(self.exhausted_s, 0.99)}

    # -- events ------------------------------------------------------------------------------

    async def evaluate_dirty(self, value_of: Callable[[str], dict | None]) -> list[BillingEvent]:
        """Evaluate every tenant changed since the last call (the agent only folds rounds in:
        a batch brings a round per source partition, one evaluation is enough), and emit what
        became due for all of them at once: one look at the events topic per partition, the
        events produced together (a thousand tenants' events, one by one, took half a minute)."""
        tenants, self.dirty = sorted(self.dirty), set()
        return await self.evaluate_many(tenants, value_of)

    async def evaluate_many(self, tenants: list[str], value_of: Callable[[str], dict | None]) -> list[BillingEvent]:
        """Evaluate `tenants` now and emit what became due for all of them at once."""
        now = datetime.now(UTC)
        return await self._emit([found for tenant in tenants for found in self._due(tenant, value_of, now)])

    def know(self, keys: Iterable[str]) -> None:
        """Round keys held in the table (recovered from its changelog, not merged here), so
        that a tenant is read from every source partition's round of its spend partition."""
        self._keys.update(keys)

    async def evaluate(self, tenant: str, value_of: Callable[[str], dict | None],
                       now: datetime | None = None) -> list[BillingEvent]:
        """Price `tenant`'s month to date from the table and emit what is newly due.

        Without a context for the current period (the tenant is not registered, or the
        warehouse was not read yet this period) nothing is emitted: the next evaluation will."""
        return await self._emit(self._due(tenant, value_of, now or datetime.now(UTC)))

    def _due(self, tenant: str, value_of: Callable[[str], dict | None],
             now: datetime) -> list[tuple[BillingEvent, int | None]]:
        """The tenant's position now (kept for the surfaces) and the events it calls for that
        this process has not seen on the topic, each with the oldest reading behind it (ms)."""
        oldest_ms = self._oldest.pop(tenant, None)
        period = self.period_of(int(now.timestamp()))
        context = self.contexts.get(tenant)
        if context is None or context.period != period:
            return []
        spend = self.spend_of(tenant, value_of).get(period, PeriodSpend())
        where = position(tenant, period, spend, context)
        self.positions[tenant] = (where, int(now.timestamp() * 1000))
        return [(event, oldest_ms) for event in due_events(where, self.policy, observed(now))
                if event.event_id not in self._local]

    async def _emit(self, due: list[tuple[BillingEvent, int | None]]) -> list[BillingEvent]:
        """Produce the events of `due` that are not on the topic yet; returns them once the
        broker acknowledged every one."""
        if not due:
            return []
        async with self._lock:
            by_partition: dict[int, list[tuple[BillingEvent, int | None]]] = {}
            for event, oldest_ms in due:
                by_partition.setdefault(spend_partition(event.tenant, self.partitions), []).append((event, oldest_ms))
            fresh = []
            already = await self.events.seen_all({partition: {event.event_id for event, _ in events}
                                                  for partition, events in by_partition.items()})
            for partition, events in sorted(by_partition.items()):
                for event, oldest_ms in events:
                    if event.event_id in self._local or event.event_id in already:
                        self._local.add(event.event_id)
                        continue
                    self._local.add(event.event_id)  # a duplicate id later in `due` is not produced twice
                    fresh.append((event, partition, oldest_ms))
            try:
                await asyncio.gather(*(self.produce(event, partition) for event, partition, _ in fresh))
            except BaseException:
                for event, _, _ in fresh:  # not known to be on the topic: the next evaluation looks again
                    self._local.discard(event.event_id)
                raise
            acknowledged_ms = time.time() * 1000
            for event, _, oldest_ms in fresh:
                self.events.emitted(event.event_id)
                self.emitted_count += 1
                if event.kind == "balance_exhausted" and oldest_ms:
                    self.exhausted_s.append(max(acknowledged_ms - oldest_ms, 0) / 1000)
                if self.metrics is not None:
                    self.metrics.billing_events.labels(event.kind).inc()
            return [event for event, _, _ in fresh]


def table_totals(values: dict[bytes, bytes | None]) -> dict[str, dict[str, PeriodSpend]]:
    """Per tenant and period, the quantities the table holds, from its changelog's latest
    values (`streams.kafka.logs.latest_values`): what `gpubill spend --stream` shows."""
    totals: dict[str, dict[str, PeriodSpend]] = {}
    for key, raw in sorted(values.items()):
        if raw is None:
            continue
        spend_round = parse_round(json.loads(raw)["round"].encode())
        for record in spend_round.records():
            periods = totals.setdefault(record.tenant, {})
            for period, spend in periods_of(record).items():
                periods.setdefault(period, PeriodSpend()).add(spend)
    return totals
