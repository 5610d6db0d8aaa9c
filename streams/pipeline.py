"""One batch of Kafka messages in, rows and dead letters out: the worker's logic per batch.

Kept out of the Faust `async for` body so it can be tested without Kafka: `process_batch`
takes `Message`s (topic, partition, offset, key, value, headers, timestamp: the fields of
aiokafka's ConsumerRecord, which the worker passes as they are) and returns what to write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable
from datetime import datetime, timezone

from gpubill.config import TOPIC_POWER, TOPIC_USAGE
from billing_rules import BillingRulesError
from schemas.errors import InvalidReading
from schemas.events import parse_reading, split_message
from schemas.fast import QuickParser
from streams.rating import Outcome, Rater

KIND_OF_TOPIC = {TOPIC_USAGE: "usage", TOPIC_POWER: "power"}

# Kafka headers on a dead letter; the value is the original message, byte for byte.
H_REASON = "gpubill-reason"
H_TOPIC = "gpubill-source-topic"
H_PARTITION = "gpubill-source-partition"
H_OFFSET = "gpubill-source-offset"
H_LINE = "gpubill-source-line"
H_INDEX = "gpubill-source-index"
H_TRUNCATED = "gpubill-truncated-from"  # the original was larger than a Kafka record may be
MAX_DEADLETTER_VALUE = 512 * 1024  # bytes of the original kept in the Kafka record (ClickHouse keeps all)


@dataclass(frozen=True, slots=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = 0  # Kafka record timestamp in ms (producer's create time), for freshness


@dataclass
class DeadLetter:
    """A message refused with a reason; both a Kafka record and a ClickHouse row."""

    message: Message
    reason: str
    line: int = 0
    index: int = 0  # 1-based element of a batched message; 0 for a single reading

    def headers(self) -> list[tuple[str, bytes]]:
        pairs = [
            (H_REASON, self.reason.encode()),
            (H_TOPIC, self.message.topic.encode()),
            (H_PARTITION, str(self.message.partition).encode()),
            (H_OFFSET, str(self.message.offset).encode()),
        ]
        if self.line:
            pairs.append((H_LINE, str(self.line).encode()))
        if self.index:
            pairs.append((H_INDEX, str(self.index).encode()))
        return pairs

    def record(self) -> tuple[bytes, list[tuple[str, bytes]]]:
        """(value, headers) of the Kafka dead letter: the original, cut to MAX_DEADLETTER_VALUE
        bytes if it is larger (a record over the broker's limit could not be produced at all;
        the ClickHouse row keeps the original whole)."""
        value, headers = self.message.value or b"", self.headers()
        if len(value) > MAX_DEADLETTER_VALUE:
            headers.append((H_TRUNCATED, str(len(value)).encode()))
            value = value[:MAX_DEADLETTER_VALUE]
        return value, headers

    def row(self, now: datetime) -> tuple:
        original = self.message.value or b""  # bytes: ClickHouse String keeps them exactly, UTF-8 or not
        return (self.message.topic, self.message.partition, self.message.offset, self.line, self.index, self.reason,
                original, now)


@dataclass
class BatchResult:
    outcome: Outcome = field(default_factory=Outcome)
    deadletters: list[DeadLetter] = field(default_factory=list)
    readings_in: dict[str, int] = field(default_factory=dict)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) → next offset
    timestamps: list[int] = field(default_factory=list)  # of every record, in ms, when asked (freshness)


Lookup = Callable[[set, set], tuple[list[tuple], list[tuple]]]


def process_batch(messages: list[Message], rater: Rater, *, known_sites, known_models, now: datetime,
                  lookup: Lookup | None = None, quick: QuickParser | None = None) -> BatchResult:
    """Validate, deduplicate, attribute and price a batch of reading messages.

    Steps: (1) decode and validate each message — or each element of a message that is a
    JSON array of readings — dead-lettering the bad ones alone; (2) ask
    `lookup` for stored counterparts the rater no longer (or never) held in memory —
    usage for power readings, power for usage readings — and preload them; (3) rate.
    `quick` is the fast validation path for these sites and models (built when not given).
    """
    result = BatchResult()
    now_s = int(now.timestamp())
    quick = quick or QuickParser(known_sites, known_models)
    accepted = []
    readings_in, positions = result.readings_in, result.positions
    for message in messages:
        topic = message.topic
        readings_in[topic] = readings_in.get(topic, 0) + 1
        position, after = (topic, message.partition), message.offset + 1
        if after > positions.get(position, 0):
            positions[position] = after
        accepted += validate_message(message, quick, known_sites, known_models, now_s, result.deadletters)
    if lookup is not None:
        readings = [reading for reading, *_ in accepted]
        check_cards(rater, lookup, readings)
        need_usage, need_power = rater.lookups(readings)
        if need_usage or need_power:
            usage_rows, power_rows = lookup(need_usage, need_power)
            rater.preload_usage(usage_rows)
            rater.preload_power(power_rows)
    # Usage before power: a power reading then finds its second's usage in memory and its
    # energy row is written joined once, not unjoined and again joined. Each stream keeps
    # its partition order (which decides duplicates and conflicts); the rows do not
    # depend on the order between the streams.
    accepted.sort(key=_power_last)
    for reading, message, value, index in accepted:
        try:
            rater.rate(reading, message.partition, message.offset, now, result.outcome)
        except BillingRulesError as exc:  # e.g. a second before the first rule in force
            result.deadletters.append(refused(message, value, index, f"cannot be priced: {exc}"))
    rater.evict()
    return result


def check_cards(rater: Any, lookup: Lookup, readings: list | None = None) -> None:
    """Ask ClickHouse, once per card, whether it holds readings of it (see
    Rater.unchecked_cards); a look-up without `stored_since` (a test's fake) skips this."""
    stored_since = getattr(lookup, "stored_since", None)
    if stored_since is None:
        return
    unchecked = rater.unchecked_cards(readings) if readings is not None else rater.unchecked_cards()
    if any(unchecked.values()):
        rater.mark_checked(unchecked, stored_since(unchecked))


def validate_message(message: Message, quick: QuickParser, known_sites, known_models, now_s: int,
                     deadletters: list[DeadLetter]) -> list[tuple]:
    """The valid readings of one message as (reading, message, bytes of the reading, element
    index: 0 for a single reading); each refused one, or the whole message, becomes a dead letter."""
    value, expect = message.value, KIND_OF_TOPIC.get(message.topic)
    if value is None:
        deadletters.append(DeadLetter(message, "empty message (no value)"))
        return []
    # The fast path takes the plainly valid single reading; the definition judges the rest.
    reading = quick(value, now_s, expect) if value[:1] == b"{" else None
    if reading is not None:
        return [(reading, message, value, 0)]
    try:
        elements = split_message(value)
    except InvalidReading as exc:
        deadletters.append(DeadLetter(message, str(exc)))
        return []
    batched = elements is not None  # a batch: each element stands or falls alone
    accepted = []
    for index, element in enumerate(elements if batched else [value], start=1):
        try:
            reading = (quick(element, now_s, expect) if batched else None) or parse_reading(
                element, known_sites=known_sites, known_models=known_models, now_s=now_s, expect_kind=expect
            )
        except InvalidReading as exc:
            deadletters.append(refused(message, element, index if batched else 0, str(exc)))
            continue
        accepted.append((reading, message, element, index if batched else 0))
    return accepted


def _power_last(item: tuple) -> bool:
    return item[0].kind == "power"


def refused(message: Message, value: bytes, index: int, reason: str) -> DeadLetter:
    """The dead letter of a whole message (index 0), or of one element of a batched message alone."""
    if not index:
        return DeadLetter(message, reason)
    element = Message(message.topic, message.partition, message.offset, message.key, value, message.headers)
    return DeadLetter(element, f"element {index}: {reason}", index=index)


def deadletter_row_from_record(message: Message, now: datetime) -> tuple:
    """A dead letter read back from gpu.deadletter.v1 (e.g. one that `replay` refused)."""
    headers = {name: value.decode("utf-8", "replace") for name, value in message.headers}
    original = message.value or b""
    return (
        headers.get(H_TOPIC, message.topic),
        int(headers.get(H_PARTITION, message.partition)),
        int(headers.get(H_OFFSET, message.offset)),
        int(headers.get(H_LINE, 0)),
        int(headers.get(H_INDEX, 0)),
        headers.get(H_REASON, "no reason given")
        + (f" (original cut to its first {len(original):,} of {headers[H_TRUNCATED]} bytes)" if H_TRUNCATED in headers else ""),
        original,
        now,
    )


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
