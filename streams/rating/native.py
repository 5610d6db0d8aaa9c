"""The Rust core (native/, module `gpubill_native`): the fast implementation of the batch
protocol (streams/rating/protocol.py), and the only module that imports the extension.

`PythonRater` (streams/rating/reference_batch.py, over `Rater` and `QuickParser`) is the
reference implementation: readable, and ≈ 20 µs of CPU a reading. The Rust `Core` does the
same work — validate the plainly valid reading, deduplicate, attribute, price, encode the
Native blocks — in ≈ 3.5 µs, mostly without the GIL, which is what lets one worker take
100,000 readings a second. What is rare stays in Python: the definition of a valid reading
(`parse_reading`) judges every message the fast path does not take, batched messages
included; prices come from the billing rules (`NativePricing`, asked once per distinct
tenant, model and second); look-ups go to ClickHouse (streams/lookup.py).
tests/unit/test_native_core.py feeds random batches to both and requires the same blocks.

`NativeRater.available()` says whether the extension is built (scripts/bootstrap builds
it when a Rust toolchain is present); without it the worker uses the Python path.
"""

from __future__ import annotations

import logging
import os
from datetime import datetime
from decimal import Decimal
from typing import Any, Callable

from billing_rules import BillingRulesError
from schemas.quick_parser import QuickParser
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.deadletters import refused
from streams.errors import StreamsError
from streams.kafka.message import Message
from streams.kafka.record_sets import RecordSet, messages_of
from streams.rating.protocol import BatchRater, BatchResult, EncodedOutcome, Lookup, SpendContributions, SpendMarks
from streams.rating.reference_batch import PythonRater
from streams.rating.validate import check_cards, validate_message
from warehouse.native_format import epoch_ms, scaled

try:
    import gpubill_native
except ImportError:  # not built: see NativeRater.available
    gpubill_native = None

log = logging.getLogger("gpubill.native")


class NativePricing:
    """Prices for the Rust core from the billing rules, as the integers of the rated_seconds
    columns (Decimal(18, 6) and Decimal(9, 4) scaled; see schemas/tables.py).

    `decimals` keeps the rule's Decimal of each scaled price it handed out, {(scaled, places):
    Decimal}, so the spend contributions carry the rules' own values (few: one per price)."""

    def __init__(self, rules: Any) -> None:
        self.rules = rules
        self.decimals: dict[tuple[int, int], Decimal] = {}

    def _scaled(self, value: Decimal, places: int) -> int:
        number = scaled(value, places)
        self.decimals[(number, places)] = value
        return number

    def rent(self, tenant: str, gpu_model: str, second: int) -> tuple[str, int, int, int]:
        rate = self.rules.rent_rate(tenant, gpu_model, second)
        return rate.plan, self._scaled(rate.list_price, 6), rate.per_s, self._scaled(rate.discount_pct, 4)

    def energy(self, site: str, second: int) -> tuple[str, int, int]:
        rate = self.rules.energy_rate(site, second)
        return rate.band, self._scaled(rate.tariff_per_kwh, 6), self._scaled(rate.pue, 4)

    def decimal(self, number: int, places: int) -> Decimal:
        """The Decimal of a price scaled by 10^places (the rule's own when it was handed out)."""
        value = self.decimals.get((number, places))
        return value if value is not None else Decimal(number).scaleb(-places)

    def period(self, second: int) -> str:
        return self.rules.period_of(second)


class NativeRater:
    """The batch protocol on the Rust core."""

    kind = "native"

    def __init__(self, rules: Any, *, horizon_s: int = 900) -> None:
        if gpubill_native is None:
            raise StreamsError("the native hot path is not built (run scripts/bootstrap with a Rust toolchain)")
        self.horizon_s = horizon_s
        self.core = gpubill_native.Core(TOPIC_USAGE, TOPIC_POWER, horizon_s)
        self.state_size = 0  # readings held in the horizon, as of the last batch
        self.state_bytes = 0  # and the memory they take
        self.use_rules(rules)

    @staticmethod
    def available() -> bool:
        return gpubill_native is not None

    def use_rules(self, rules: Any) -> None:
        self.rules, self.pricing = rules, NativePricing(rules)
        self.known_sites, self.known_models = frozenset(rules.site_ids), frozenset(rules.model_ids)
        self.quick = QuickParser(self.known_sites, self.known_models)
        self.core.use_rules(sorted(self.known_sites), sorted(self.known_models))

    def forget(self) -> None:
        self.core.forget()  # called between batches (the feeder drains them first)
        self.state_size = self.state_bytes = 0

    def rate_batch(self, items: list, *, now: datetime, lookup: Lookup | None = None,
                   timestamps: bool = False, spend_marks: SpendMarks | None = None) -> BatchResult:
        return process_batch_native(items, self, now=now, lookup=lookup, timestamps=timestamps,
                                    spend_marks=spend_marks)

    def evict(self) -> int:
        dropped = self.core.evict()
        # Copied here for the metrics: the event loop reads them while the rating thread may
        # be inside the core with the next batch (the core is borrowed then, and asking it
        # would fail).
        self.state_size, self.state_bytes = self.core.state_size, self.core.state_bytes
        return dropped


def best_rater(rules: Any) -> BatchRater:
    """The Rust core when it is built and not turned off (GPUBILL_NATIVE=0), else the Python rater."""
    if os.environ.get("GPUBILL_NATIVE", "1") != "0" and NativeRater.available():
        return NativeRater(rules)
    log.warning("rating with the pure-Python path (%s)",
                "GPUBILL_NATIVE=0" if NativeRater.available() else "gpubill_native is not built: run scripts/bootstrap")
    return PythonRater(rules)


def process_batch_native(items: list, rater: NativeRater, *, now: datetime, lookup: Lookup | None = None,
                         timestamps: bool = False, spend_marks: SpendMarks | None = None) -> BatchResult:
    """`process_batch` (streams/rating/reference_batch.py) on the Rust core: the same steps, rows and dead letters.

    `items` are `Message`s and `RecordSet`s (streams/kafka/record_sets.py): plain sets are read in
    place by the core; the others are decoded here. With `timestamps` the result carries
    every record's Kafka timestamp (for the freshness benchmark). With `spend_marks` the core
    also sums the spend contributions (native/src/spend.rs); Python only turns its few
    aggregated keys into `SpendContributions` (no work per row)."""
    result = BatchResult()
    core, now_s = rater.core, int(now.timestamp())
    messages: list[Message] = []
    sets: list[RecordSet] = []
    for item in items:
        if not isinstance(item, RecordSet):
            messages.append(item)
        elif item.plain:
            sets.append(item)
        else:
            messages += messages_of(item)
    # (1) The core takes the plainly valid single readings; the definition judges the rest.
    others, result.readings_in, result.positions, judge, stamps = core.parse(
        messages, [(s.topic, s.partition, s.data, s.start) for s in sets], now_s, timestamps)
    for s in sets:
        at = (s.topic, s.partition)
        result.positions[at] = max(result.positions.get(at, 0), s.next_offset)
    if timestamps:
        result.timestamps = [m.timestamp for m in messages] + stamps
    found = {index: Message(*fields) for index, *fields in judge}  # set records Python judges
    found.update((index, messages[index]) for index in others)
    elements: dict[tuple[int, int], bytes] = {}
    for index in sorted(found):
        message = found[index]
        for reading, _, value, element in validate_message(
            message, rater.quick, rater.known_sites, rater.known_models, now_s, result.deadletters
        ):
            if element:
                elements[(index, element)] = value
            _push(core, index, element, reading, message)
    # (2) What ClickHouse holds that memory cannot answer for.
    if lookup is not None:
        check_cards(core, lookup)
        need_usage, need_power = core.lookups()
        if need_usage or need_power:
            usage_rows, power_rows = lookup(set(need_usage), set(need_power))
            core.preload_usage([_usage_row(row) for row in usage_rows])
            core.preload_power([_power_row(row) for row in power_rows])
    # (3) Rate and encode.
    marks = None if spend_marks is None else dict(spend_marks)
    (usage_block, usage_rows, power_block, power_rows, rated_block, rated_rows, unallocated, conflicts, duplicates,
     not_priced, hours, spend) = core.rate(rater.pricing, BillingRulesError, epoch_ms(now), marks)
    if spend is not None:
        result.spend = _spend_contributions(*spend, rater.pricing.decimal)
    outcome = EncodedOutcome(duplicates=duplicates, unallocated=unallocated, hours=hours)
    for table, block, rows in (("rated_seconds", rated_block, rated_rows), ("readings_usage", usage_block, usage_rows),
                               ("readings_power", power_block, power_rows)):
        if rows:
            outcome.blocks[table] = (block, rows)
    outcome.conflicts = _with_kept_ids(conflicts, lookup, now)
    for index, element, reason in not_priced:
        message = found.get(index) or _record_at(index, messages, sets)
        value = elements[(index, element)] if element else message.value
        result.deadletters.append(refused(message, value, element, reason))
    result.outcome = outcome
    rater.evict()
    return result


def _spend_contributions(rent: list[tuple], energy: list[tuple],
                        decimal: Callable[[int, int], Decimal]) -> SpendContributions:
    """The core's spend contributions (native/src/spend.rs: one tuple per key, prices as the
    scaled integers of `NativePricing`) with the prices as Decimals (`decimal(number, places)`)."""
    return SpendContributions(
        rent={(tenant, partition, period, model, plan, decimal(price_e6, 6), per_s, decimal(discount_e4, 4)): seconds
              for tenant, partition, period, model, plan, price_e6, per_s, discount_e4, seconds in rent},
        energy={(tenant, partition, period, site, band, decimal(tariff_e6, 6), decimal(pue_e4, 4)): mj
                for tenant, partition, period, site, band, tariff_e6, pue_e4, mj in energy})


def _record_at(index: int, messages: list[Message], sets: list[RecordSet]) -> Message:
    """Message `index` of a batch numbered as the core numbers it: `messages`, then the
    records of `sets` in order (rare: a fast-path reading the rules could not price)."""
    if index < len(messages):
        return messages[index]
    index -= len(messages)
    for records in sets:
        decoded = messages_of(records)
        if index < len(decoded):
            return decoded[index]
        index -= len(decoded)
    raise IndexError(f"no record {index} in the batch")


def _with_kept_ids(conflicts: list[tuple], lookup: Lookup | None, now: datetime) -> list[tuple]:
    """Conflict rows, with the kept reading's event id read back from ClickHouse where the
    core does not hold it (a reading of an earlier batch: already written, or preloaded)."""
    unknown: dict[str, set] = {}
    for stream, gpu, second, kept, *_ in conflicts:
        if kept is None:
            unknown.setdefault(stream, set()).add((gpu, second))
    known = {stream: lookup.kept_event_ids(stream, keys) if lookup is not None else {}
             for stream, keys in unknown.items()}
    return [(stream, gpu, second, kept if kept is not None else known[stream].get((gpu, second), ""), event_id,
             partition, offset, now, reason)
            for stream, gpu, second, kept, event_id, partition, offset, reason in conflicts]


def _push(core: Any, index: int, element: int, reading: Any, message: Message) -> None:
    if reading.kind == "usage":
        core.push_usage(index, element, reading.event_id, reading.ts, reading.second, reading.site, reading.node,
                        reading.gpu_uuid, reading.gpu_model, reading.tenant, reading.instance,
                        scaled(reading.util_pct, 4), reading.mem_used_mib, message.partition, message.offset)
    else:
        core.push_power(index, element, reading.event_id, reading.ts, reading.second, reading.site, reading.node,
                        reading.gpu_uuid, reading.power_mw, message.partition, message.offset, reading.energy_mj,
                        reading.energy_epoch)


def _usage_row(row: tuple) -> tuple:
    gpu, second, event_id, tenant, instance, gpu_model, offset = row
    return gpu, int(second), event_id, tenant, instance, gpu_model, int(offset)


def _power_row(row: tuple) -> tuple:
    gpu, second, event_id, site, node, power_mw, partition, offset, energy_mj, epoch = row
    return gpu, int(second), event_id, site, node, int(power_mw), int(partition), int(offset), int(energy_mj), epoch or ""

