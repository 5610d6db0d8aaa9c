"""Deduplicate, attribute and price readings: the stateful heart of the worker, without I/O.

Longer than 400 lines on purpose: the Rater is one state machine (deduplication,
attribution, versions, eviction and spend all read and change the same held readings), and
it is the reference the Rust core (native/src) is held to; split, the rules that decide a
row would sit apart from the state they decide on.

`Rater.rate()` takes one validated reading with its Kafka position and returns the rows
it causes. All rows are keyed so that writing them again is harmless (ClickHouse
ReplacingMergeTree, see schemas/migrations/0001_init.sql):

- a usage reading with a tenant gives a `rent` row for (gpu, second);
- a power reading gives an `energy` row for (gpu, second), attributed to the tenant of
  the same second's usage reading, or unallocated (tenant '') when none is known yet; with
  the card's counter, also rows for the seconds since the card's previous reading that the
  counter measured, and the next reading's rows again (billing_rules/counters.py: a row's
  version carries the rank of the interval that covers it, so the final interval's wins);
- a usage reading whose power reading was already rated re-writes that energy row,
  joined, with a higher version: that is the "correcting delta" that moves energy from
  unallocated to the tenant. Versions only grow with information (joined beats unjoined,
  then the earlier offset wins), so the rows converge to the batch join of SPEC §4
  whatever the arrival order.

Deduplication (SPEC §4), per stream: a reading whose event_id is held with the same
content is a duplicate, counted and dropped. A conflict is recorded, and the first in
partition order counts, when (a) the event_id is held with other content — `event_id
reused` — or (b) another event_id already has the reading of its (gpu, second) — `second
taken`. "Content" is what the Rust core holds of a reading (native/src/held.rs), so both
raters judge alike: the (gpu_uuid, second), and for usage the tenant, instance and
gpu_model, for power the site, node, power_mw (whole milliwatts) and counter. Not compared: the ts
text beyond its second, util_pct, mem_used_mib, and a usage reading's site and node; a
reading differing from the held one only there is a duplicate. State is kept for `horizon_s` behind the newest second seen and evicted
after that, so memory is bounded by fleet size × horizon, not by the length of the run.

Spend: an `Outcome` given a `SpendTally` also counts its rows' spend contributions past the
tally's marks (streams/rating/protocol.py; the Rust core's is native/src/spend.rs).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from billing_rules.counters import MAX_GAP_S, Sample, Share, covered, rank, rise
from billing_rules.errors import BillingRulesError
from schemas.events import PowerReading, UsageReading, stored_ts
from schemas.quick_parser import Power, Usage
from streams.rating.protocol import SpendContributions, SpendMarks, counts_energy, counts_rent
from warehouse.blocks import encode_rows

# ReplacingMergeTree keeps the row with the highest version. Offsets stay below 2**48; an
# energy row's rank (billing_rules/counters.py: how short the interval that covers it is)
# sits above the joined bit, so the row of the final interval wins whatever came when.
_OFFSET_SPAN = 1 << 48
_JOINED = 1 << 50
_RANK_SHIFT = 51
ZERO = Decimal(0)
# The `reason` of a conflicts row (schemas/migrations/0010_conflict_reasons.sql).
SECOND_TAKEN = "second taken"
EVENT_ID_REUSED = "event_id reused"


class Rules(Protocol):  # the part of billing_rules.RuleSet the rater needs
    def period_of(self, second: int) -> str: ...
    def rent_rate(self, tenant: str, gpu_model: str, second: int) -> Any: ...
    def energy_rate(self, site: str, second: int) -> Any: ...


@dataclass(slots=True)
class _UsageSeen:
    event_id: str
    tenant: str | None
    instance: str | None
    gpu_model: str
    offset: int
    # Spend only: whether this process counted the reading's rent, and the join of its
    # (gpu, second), so that a replay counts each once (see `_replayed`).
    rent_spent: bool = False
    join_spent: bool = False


@dataclass(slots=True)
class _PowerSeen:
    event_id: str
    gpu_uuid: str
    second: int
    site: str
    node: str
    power_mw: int
    partition: int
    offset: int
    energy_mj: int | None = None  # the card's counter, None without one
    epoch: str | None = None

    @property
    def sample(self) -> Sample:
        return Sample(self.second, self.power_mw, self.energy_mj, self.epoch)


@dataclass
class Outcome:
    """Rows caused by one batch of readings, as tuples in schemas.tables column order."""

    readings_usage: list[tuple] = field(default_factory=list)
    readings_power: list[tuple] = field(default_factory=list)
    rated: list[tuple] = field(default_factory=list)
    conflicts: list[tuple] = field(default_factory=list)
    duplicates: int = 0
    spend: SpendTally | None = None  # counts the rated rows' spend contributions when given

    @property
    def row_count(self) -> int:
        return len(self.readings_usage) + len(self.readings_power) + len(self.rated)

    @property
    def blocks(self) -> dict[str, tuple[bytes, int]]:
        """The hot tables' rows as Native blocks (the batch protocol's `blocks`), encoded when
        asked: in the writer thread, as the sink writes them."""
        return encode_outcome(self)

    @property
    def unallocated(self) -> int:
        """Energy rows without a tenant (yet)."""
        return sum(1 for row in self.rated if row[0] == "energy" and row[4] == "")

    @property
    def hours(self) -> list[tuple[str, int]]:
        """The (period, UTC hour start) of every rated row, once each, sorted."""
        return sorted({(row[3], row[2] - row[2] % 3600) for row in self.rated})

    def extend(self, other: "Outcome") -> None:
        self.readings_usage += other.readings_usage
        self.readings_power += other.readings_power
        self.rated += other.rated
        self.conflicts += other.conflicts
        self.duplicates += other.duplicates


class SpendTally:
    """The spend contributions of rated rows, counted past `marks` (streams/rating/protocol.py:
    `counts_rent`, `counts_energy`); `contributions` holds them, keys of zero left out."""

    def __init__(self, marks: SpendMarks) -> None:
        self.marks = marks
        self.contributions = SpendContributions()

    def rent(self, row: tuple) -> None:
        """Count a rent row (rated_seconds order): one second, read at the row's offset."""
        tenant, partition, offset = row[4], row[19], row[20]
        if counts_rent(self.marks, tenant, partition, offset):
            key = (tenant, partition, row[3], row[6], row[9], row[10], row[11], row[12])
            self.contributions.rent[key] = self.contributions.rent.get(key, 0) + 1

    def energy(self, row: tuple, usage_offset: int | None) -> None:
        """Count an energy row joined with the usage reading read at `usage_offset` (None:
        unjoined): its power_mw over one second, in mJ."""
        tenant, partition, power_offset, energy_mj = row[4], row[19], row[20], row[14]
        if energy_mj and counts_energy(self.marks, tenant, partition, usage_offset, power_offset):
            key = (tenant, partition, row[3], row[7], row[15], row[16], row[17])
            self.contributions.energy[key] = self.contributions.energy.get(key, 0) + energy_mj


def encode_outcome(outcome: Outcome) -> dict[str, tuple[bytes, int]]:
    """The Native blocks of an `Outcome`'s hot tables, {table: (block, rows)}."""
    return {table: encode_rows(table, rows) for table, rows in (
        ("rated_seconds", outcome.rated), ("readings_usage", outcome.readings_usage),
        ("readings_power", outcome.readings_power)) if rows}


class Rater:
    """Per-worker state: what was seen in the last `horizon_s` seconds, per stream."""

    def __init__(self, rules: Rules, *, horizon_s: int = 900) -> None:
        self.rules = rules
        self.horizon_s = horizon_s
        self.forget()

    def forget(self) -> None:
        """Drop everything held in memory, as a restart would (after a rebalance another worker
        may have rated these cards meanwhile): what is needed again is read from ClickHouse."""
        self.newest_second = 0
        # (gpu, second) → first reading, per stream; event id → its (gpu, second), per stream.
        self._usage: dict[tuple[str, int], _UsageSeen] = {}
        self._power: dict[tuple[str, int], _PowerSeen] = {}
        self._usage_ids: dict[str, tuple[str, int]] = {}
        self._power_ids: dict[str, tuple[str, int]] = {}
        # Every (gpu, second) held, in the order its first reading of either stream came:
        # eviction takes both streams' readings of a (gpu, second) at once, from the front.
        # (The native core keeps one record per (gpu, second) the same way: native/src/held.rs.)
        self._arrival: OrderedDict[tuple[str, int], None] = OrderedDict()
        # Per stream: the newest second seen, and per gpu the first second this process saw
        # (since it started or last forgot). Readings near or before that second may have
        # been seen by another process, so they are checked in ClickHouse (see `lookups`).
        self._newest = {"usage": 0, "power": 0}
        self._first: dict[str, dict[str, int]] = {"usage": {}, "power": {}}
        self._cutoff = 0  # everything older than this may have been evicted
        # Per stream and gpu, once ClickHouse was asked (see `unchecked_cards`): the second
        # from which it held none of the card's readings then, or None when it held some.
        self._clean: dict[str, dict[str, int | None]] = {"usage": {}, "power": {}}
        self._periods: dict[int, str] = {}
        # Per card, the newest second of a power reading held: a reading past it has no next
        # one in memory (counter energy looks for it; see `_near`).
        self._newest_power: dict[str, int] = {}

    def use_rules(self, rules: Rules) -> None:
        """Price from now on with `rules` (the state of what was seen stays)."""
        self.rules = rules
        self._periods.clear()  # the billing time zone may have changed

    def _period_of(self, second: int) -> str:
        """The billing period of `second`; a fleet's readings share few seconds per batch."""
        period = self._periods.get(second)
        if period is None:
            if len(self._periods) >= 1 << 14:
                self._periods.clear()
            period = self._periods[second] = self.rules.period_of(second)
        return period

    state_bytes = None  # not measured for Python objects (the native core reports its own)

    @property
    def state_size(self) -> int:
        return len(self._usage) + len(self._power)

    def rate(self, reading: Usage | Power | UsageReading | PowerReading, partition: int, offset: int, now: Any,
             out: Outcome) -> None:
        """Add the rows caused by `reading` (at Kafka `partition`/`offset`) to `out`.

        Raises a billing_rules error, with nothing changed, when the reading cannot be priced.
        """
        second = reading.second
        usage = reading.kind == "usage"
        # Price first: a reading that cannot be priced must move no clock and no state.
        if usage:
            rent = self.rules.rent_rate(reading.tenant, reading.gpu_model, second) if reading.tenant is not None else None
        else:
            self.rules.energy_rate(reading.site, second)  # cached for _energy_row
        if second > self.newest_second:
            self.newest_second = second
        stream = reading.kind
        if second > self._newest[stream]:
            self._newest[stream] = second
        first = self._first[stream]
        if reading.gpu_uuid not in first:
            first[reading.gpu_uuid] = second
        if usage:
            self._rate_usage(reading, second, partition, offset, now, out, rent)
        else:
            self._rate_power(reading, second, partition, offset, now, out)

    def evict(self) -> int:
        """Forget readings older than the horizon; returns how many entries were dropped.

        (gpu, second)s sit in arrival order, so this pops from the front until it meets a
        fresh one: amortized O(dropped). A late reading parked behind a fresh one waits at
        most one more horizon, which keeps memory bounded all the same.
        """
        # The slower stream's clock decides, so that a topic consumed ahead of the other
        # does not evict entries its counterpart still needs (but never more than four
        # horizons behind the faster one, to stay bounded if one stream stops).
        slower = min(self._newest.values()) or self.newest_second
        cutoff = max(slower, self.newest_second - 4 * self.horizon_s) - self.horizon_s
        self._cutoff = max(self._cutoff, cutoff)
        dropped = 0
        while self._arrival:
            key = next(iter(self._arrival))
            if key[1] >= cutoff:
                break
            self._arrival.popitem(last=False)
            for seen, ids in ((self._usage, self._usage_ids), (self._power, self._power_ids)):
                held = seen.pop(key, None)
                if held is not None:
                    if ids.get(held.event_id) == key:
                        del ids[held.event_id]
                    dropped += 1
        return dropped

    def lookups(self, readings: list) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
        """Keys ClickHouse must be asked about before rating `readings`: (usage keys, power keys).

        Memory answers for what this process saw. Another process — one that ran before
        this one, or owned the partition before a rebalance — may have seen a reading of the
        same (stream, gpu, second), a duplicate or a conflict, or the counterpart on the
        other stream. That is only possible near or before the first second this process
        saw of that card on that stream: the records before it in the partition are older,
        give or take the shuffling a horizon allows (two horizons are allowed for), or older
        than the eviction cutoff. So a reading is looked up on its own stream, and its
        counterpart on the other, when memory cannot answer and the second lies in that
        window. (A counterpart in the same batch is asked for on its own stream anyway.)
        """
        need = {"usage": set(), "power": set()}
        memory = {"usage": self._usage, "power": self._power}
        for reading in readings:
            key = (reading.gpu_uuid, reading.second)
            own = reading.kind
            other = "power" if own == "usage" else "usage"
            if key not in memory[own] and self._unsure(own, key):
                need[own].add(key)
            if key not in memory[other] and self._unsure(other, key):
                need[other].add(key)
            # Counter energy reads the card's power readings up to MAX_GAP_S on either side
            # (billing_rules/counters.py), and a power reading rates the seconds between it and
            # them, each joined to its usage. Whether a key is unsure only grows towards the
            # past, so the oldest of them answers for all.
            gpu, second = key
            for stream in ("power", "usage") if own == "power" else ("power",):
                if self._unsure(stream, (gpu, second - MAX_GAP_S)):
                    held, wanted = memory[stream], need[stream]
                    for near in range(second - MAX_GAP_S, second + MAX_GAP_S + 1):
                        if (gpu, near) not in held and self._unsure(stream, (gpu, near)):
                            wanted.add((gpu, near))
        return need["usage"], need["power"]

    def _unsure(self, stream: str, key: tuple[str, int]) -> bool:
        """Could another process hold a reading of `stream` for `key` that memory lacks?"""
        clean = self._clean[stream].get(key[0])
        if clean is not None and key[1] >= clean and key[1] >= self._cutoff:
            return False  # ClickHouse held nothing of the card from `clean` on; since then only we wrote
        first = self._first[stream].get(key[0])
        return first is None or key[1] <= first + 2 * self.horizon_s or key[1] < self._cutoff

    def unchecked_cards(self, readings: list) -> dict[str, dict[str, int]]:
        """Cards of `readings` not yet checked in ClickHouse, per stream: {gpu: since}, since
        being a horizon before the card's oldest second in the batch.

        Asking ClickHouse once per card whether it holds any reading of it from `since` on
        spares the per-key look-ups of `lookups` for a fresh card (a new card, or a worker
        that starts on topics no other process rated): when ClickHouse held none, only this
        process writes that card's readings from then on (a card's readings share a
        partition, and a partition one worker), and memory answers for them until evicted.
        """
        oldest: dict[str, int] = {}
        for reading in readings:
            gpu, second = reading.gpu_uuid, reading.second
            if second < oldest.get(gpu, second + 1):
                oldest[gpu] = second
        return {stream: {gpu: second - self.horizon_s for gpu, second in oldest.items() if gpu not in clean}
                for stream, clean in self._clean.items()}

    def mark_checked(self, checked: dict[str, dict[str, int]], stored: dict[str, set[str]]) -> None:
        """Record what ClickHouse answered for `unchecked_cards`: per stream, the cards of which
        it held some reading from their `since` on."""
        for stream, cards in checked.items():
            clean, held = self._clean[stream], stored.get(stream, set())
            for gpu, since in cards.items():
                clean[gpu] = None if gpu in held else since

    def preload_usage(self, rows: list[tuple]) -> None:
        """Stored usage readings: (gpu, second, event_id, tenant, instance, gpu_model, offset)."""
        for gpu, second, event_id, tenant, instance, gpu_model, offset in rows:
            key = (gpu, int(second))
            if key not in self._usage:
                self._hold(self._usage, self._usage_ids, key, _UsageSeen(event_id, tenant, instance, gpu_model, int(offset)))

    def preload_power(self, rows: list[tuple]) -> None:
        """Stored power readings: (gpu, second, event_id, site, node, power_mw, partition, offset,
        energy_mj, energy_epoch) — epoch '' for a reading without a counter."""
        for gpu, second, event_id, site, node, power_mw, partition, offset, energy_mj, epoch in rows:
            key = (gpu, int(second))
            if key not in self._power:
                power = _PowerSeen(event_id, gpu, int(second), site, node, int(power_mw), int(partition), int(offset),
                                   int(energy_mj) if epoch else None, epoch or None)
                self._hold(self._power, self._power_ids, key, power)

    def _hold(self, seen: dict, ids: dict, key: tuple[str, int], reading: _UsageSeen | _PowerSeen) -> None:
        """Remember the first reading of one stream for `key`."""
        seen[key] = reading
        if seen is self._power and key[1] > self._newest_power.get(key[0], -1):
            self._newest_power[key[0]] = key[1]
        # An id names the first (gpu, second) held with it; a stored reading read back with
        # an id held for another one is kept, not indexed (as native/src/held.rs does).
        ids.setdefault(reading.event_id, key)
        self._arrival.setdefault(key)

    @staticmethod
    def _is_first(seen: dict, ids: dict, reading: Any, key: tuple[str, int], partition: int, offset: int,
                  now: Any, out: Outcome) -> bool:
        """SPEC §4 dedupe on one stream (see the module docstring): a held event_id with the
        same content is a duplicate; with other content, or another reading of an already-seen
        (gpu, second), it is a conflict, recorded, and the first one counts."""
        held_at = ids.get(reading.event_id)
        if held_at is not None:
            if held_at == key and _same_content(seen[held_at], reading):
                out.duplicates += 1
                return False
            out.conflicts.append((reading.kind, reading.gpu_uuid, key[1], reading.event_id, reading.event_id,
                                  partition, offset, now, EVENT_ID_REUSED))
            return False
        first = seen.get(key)
        if first is not None:
            out.conflicts.append((reading.kind, reading.gpu_uuid, key[1], first.event_id, reading.event_id,
                                  partition, offset, now, SECOND_TAKEN))
            return False
        return True

    # -- usage ---------------------------------------------------------------------------

    def _rate_usage(self, reading: Usage | UsageReading, second: int, partition: int, offset: int, now: Any, out: Outcome,
                    rate: Any) -> None:
        key = (reading.gpu_uuid, second)
        if not self._is_first(self._usage, self._usage_ids, reading, key, partition, offset, now, out):
            if out.spend is not None and self._replayed(self._usage.get(key), reading, offset):
                self._spend_usage(self._usage[key], reading, partition, rate, now, out)
            return
        self._hold(self._usage, self._usage_ids, key, _UsageSeen(reading.event_id, reading.tenant, reading.instance, reading.gpu_model, offset))
        out.readings_usage.append(
            (
                reading.event_id, stored_ts(reading.ts, second), second, reading.site, reading.node, reading.gpu_uuid,
                reading.gpu_model, reading.tenant, reading.instance, reading.util_pct, reading.mem_used_mib,
                partition, offset, now,
            )
        )
        if rate is not None:
            row = (
                "rent", reading.gpu_uuid, second, self._period_of(second), reading.tenant,
                reading.instance or "", reading.gpu_model, reading.site, reading.node,
                rate.plan, rate.list_price, rate.per_s, rate.discount_pct, reading.util_pct, 0, "", ZERO, ZERO,
                _OFFSET_SPAN - 1 - offset, partition, offset, 0, now,
            )
            out.rated.append(row)
            if out.spend is not None:
                out.spend.rent(row)
                self._usage[key].rent_spent = True
        # The energy of this second was rated before its usage: join it now.
        cover = self._energy_at(reading.gpu_uuid, second)
        if cover is not None:
            self._add_energy(*cover, self._usage[key], now, out)

    # -- power ---------------------------------------------------------------------------

    def _rate_power(self, reading: Power | PowerReading, second: int, partition: int, offset: int, now: Any, out: Outcome) -> None:
        key = (reading.gpu_uuid, second)
        if not self._is_first(self._power, self._power_ids, reading, key, partition, offset, now, out):
            held = self._power.get(key)
            if out.spend is not None and self._replayed(held, reading, offset):
                self._spend_covered(held, now, out)
            return
        energy_mj, epoch = getattr(reading, "energy_mj", None), getattr(reading, "energy_epoch", None)
        power = _PowerSeen(reading.event_id, reading.gpu_uuid, second, reading.site, reading.node, reading.power_mw,
                           partition, offset, energy_mj, epoch)
        self._hold(self._power, self._power_ids, key, power)
        out.readings_power.append(
            (
                reading.event_id, stored_ts(reading.ts, second), second, reading.site, reading.node, reading.gpu_uuid,
                power.power_mw, partition, offset, energy_mj or 0, epoch or "", now,
            )
        )
        # The seconds this reading covers, and those of the next reading, whose previous
        # reading it now is (billing_rules/counters.py). Where the interval it splits was
        # measured and a part no longer is, the seconds between get 0 mJ again.
        before, after = self._near(reading.gpu_uuid, second, -1), self._near(reading.gpu_uuid, second, 1)
        was_measured = before is not None and after is not None and rise(before.sample, after.sample) is not None
        self._cover(before, power, was_measured, now, out)
        if after is not None:
            self._cover(power, after, was_measured, now, out)

    def _near(self, gpu: str, second: int, step: int) -> _PowerSeen | None:
        """The card's nearest power reading held within MAX_GAP_S before (step −1) or after (+1) `second`."""
        power = self._power
        if step > 0 and second >= self._newest_power.get(gpu, second):
            return None  # nothing held after it: skip the probes
        for near in range(second + step, second + step * (MAX_GAP_S + 1), step):
            held = power.get((gpu, near))
            if held is not None:
                return held
        return None

    def _cover(self, prev: _PowerSeen | None, cur: _PowerSeen, withdraw: bool, now: Any, out: Outcome) -> None:
        """Rate the seconds of (prev, cur]: `covered`'s shares, or, when the counter cannot be used
        and `withdraw`, 0 mJ for the seconds between that an earlier interval had measured."""
        shares = covered(prev.sample if prev is not None else None, cur.sample)
        if withdraw and len(shares) == 1 and prev is not None:
            shares = [Share(second, 0, False) for second in range(prev.second + 1, cur.second)] + shares
        grade = rank(prev.second if prev is not None else None, cur.second)
        gpu = cur.gpu_uuid
        for share in shares:
            self._add_energy(cur, share, grade, self._usage.get((gpu, share.second)), now, out)

    def _energy_at(self, gpu: str, second: int) -> tuple[_PowerSeen, Share, int] | None:
        """What rates the energy of (gpu, second) now: (covering reading, share, rank), or None
        when nothing held covers it."""
        own = self._power.get((gpu, second))
        if own is not None:
            prev = self._near(gpu, second, -1)
            share = covered(prev.sample if prev is not None else None, own.sample)[-1]
            return own, share, rank(prev.second if prev is not None else None, second)
        before = self._near(gpu, second, -1)
        after = self._near(gpu, second, 1) if before is not None else None
        if after is None or rise(before.sample, after.sample) is None:
            return None
        return after, covered(before.sample, after.sample)[second - before.second - 1], rank(before.second, after.second)

    def _add_energy(self, cover: _PowerSeen, share: Share, grade: int, usage: _UsageSeen | None, now: Any,
                    out: Outcome) -> None:
        row = self._energy_row(cover, share, grade, usage, now)
        if row is None:
            return
        out.rated.append(row)
        if out.spend is not None and usage is not None and not usage.join_spent:
            # A (gpu, second)'s join counts once, as first rated: a late reading that splits its
            # interval again changes the invoice, not the live spend already counted.
            out.spend.energy(row, usage.offset)
            usage.join_spent = True

    # -- spend of replays ----------------------------------------------------------------

    @staticmethod
    def _replayed(held: _UsageSeen | _PowerSeen | None, reading: Any, offset: int) -> bool:
        """Whether a duplicate is the held reading read again at its own offset (a batch re-read
        after a crash): its rows are stored, but its spend may not have been produced
        (streams/spend/ledger.py), so it counts once more, past the marks, if this process has
        not counted it yet."""
        return (held is not None and held.event_id == reading.event_id and held.offset == offset
                and _same_content(held, reading))

    def _spend_usage(self, usage: _UsageSeen, reading: Any, partition: int, rate: Any, now: Any, out: Outcome) -> None:
        """The spend a replayed usage reading causes: its rent and its join, each once."""
        second = reading.second
        if rate is not None and not usage.rent_spent:
            usage.rent_spent = True
            out.spend.rent(("rent", reading.gpu_uuid, second, self._period_of(second), reading.tenant, "", reading.gpu_model,
                            "", "", rate.plan, rate.list_price, rate.per_s, rate.discount_pct, ZERO, 0, "", ZERO, ZERO,
                            0, partition, usage.offset, 0, now))
        self._spend_join(reading.gpu_uuid, second, usage, now, out)

    def _spend_covered(self, power: _PowerSeen, now: Any, out: Outcome) -> None:
        """The joins a replayed power reading rated: of its own second, and of the seconds
        before it that its counter measured."""
        gpu, second = power.gpu_uuid, power.second
        prev = self._near(gpu, second, -1)
        for share in covered(prev.sample if prev is not None else None, power.sample):
            usage = self._usage.get((gpu, share.second))
            if usage is not None:
                self._spend_join(gpu, share.second, usage, now, out)

    def _spend_join(self, gpu: str, second: int, usage: _UsageSeen, now: Any, out: Outcome) -> None:
        """Count the join of (gpu, second) with `usage` unless this process counted it already."""
        if usage.join_spent:
            return
        cover = self._energy_at(gpu, second)
        row = self._energy_row(*cover, usage, now) if cover is not None else None
        if row is not None:
            usage.join_spent = True
            out.spend.energy(row, usage.offset)

    def _energy_row(self, cover: _PowerSeen, share: Share, grade: int, usage: _UsageSeen | None, now: Any) -> tuple | None:
        """The energy row of `share`'s second, rated by the reading `cover` (the second's own, or
        the next one, for a second its counter measured); None when that second has no price."""
        second = share.second
        try:
            rate = self.rules.energy_rate(cover.site, second)
        except BillingRulesError:
            return None  # a second between two readings, before the first rule in force
        version = (grade << _RANK_SHIFT) + _OFFSET_SPAN - 1 - cover.offset
        if usage is not None:
            version += _JOINED
            tenant, instance, gpu_model = usage.tenant or "", usage.instance or "", usage.gpu_model
        else:
            # No usage reading (yet): no tenant and no model. Taking the model from another
            # second of the card would depend on arrival order; the join fills it in.
            tenant, instance, gpu_model = "", "", ""
        return (
            "energy", cover.gpu_uuid, second, self._period_of(second), tenant, instance, gpu_model,
            cover.site, cover.node, "", ZERO, 0, ZERO, ZERO, share.energy_mj, rate.band, rate.tariff_per_kwh,
            rate.pue, version, cover.partition, cover.offset, int(share.measured), now,
        )


def _same_content(held: _UsageSeen | _PowerSeen, reading: Any) -> bool:
    """Whether `reading` says what the reading held for its (gpu, second) says, as far as it is
    held: tenant, instance and model of a usage reading; site, node, milliwatts and counter of power."""
    if isinstance(held, _UsageSeen):
        return (held.tenant, held.instance, held.gpu_model) == (reading.tenant, reading.instance, reading.gpu_model)
    return ((held.site, held.node, held.power_mw, held.energy_mj, held.epoch)
            == (reading.site, reading.node, reading.power_mw, getattr(reading, "energy_mj", None),
                getattr(reading, "energy_epoch", None)))
