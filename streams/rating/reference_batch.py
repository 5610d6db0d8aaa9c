"""The Python reference rater, a batch at a time: `process_batch` and `PythonRater`.

`process_batch` is the worker's logic per batch, readable and testable without Kafka: it
takes `Message`s and returns the reference `Outcome`'s rows and the dead letters.
`PythonRater` wraps it in the batch protocol (streams/rating/protocol.py): record sets are
decoded first; the `Outcome`'s rows become Native blocks when the sink asks for them. The Rust core
(streams/rating/native.py) is held to it block for block.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from billing_rules import BillingRulesError
from schemas.quick_parser import QuickParser
from streams.deadletters import refused
from streams.kafka.message import Message
from streams.kafka.record_sets import expand
from streams.rating.protocol import BatchResult, Lookup, SpendMarks
from streams.rating.reference import Outcome, Rater, SpendTally
from streams.rating.validate import check_cards, validate_message


def process_batch(messages: list[Message], rater: Rater, *, known_sites, known_models, now: datetime,
                  lookup: Lookup | None = None, quick: QuickParser | None = None,
                  spend_marks: SpendMarks | None = None) -> BatchResult:
    """Validate, deduplicate, attribute and price a batch of reading messages.

    Steps: (1) decode and validate each message — or each element of a message that is a
    JSON array of readings — dead-lettering the bad ones alone; (2) ask
    `lookup` for stored counterparts the rater no longer (or never) held in memory —
    usage for power readings, power for usage readings — and preload them; (3) rate.
    `quick` is the fast validation path for these sites and models (built when not given).
    The result's `outcome` is the reference `Outcome` (rows as tuples). With `spend_marks`
    the result's `spend` holds the rows' spend contributions past them (protocol.py).
    """
    tally = SpendTally(spend_marks) if spend_marks is not None else None
    result = BatchResult(outcome=Outcome(spend=tally))
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
    if tally is not None:
        result.spend = tally.contributions
    return result


def _power_last(item: tuple) -> bool:
    return item[0].kind == "power"


class PythonRater:
    """The batch protocol on the reference `Rater` (≈ 5× slower than the Rust core, same rows)."""

    kind = "python"
    state_bytes = None  # not measured for Python objects

    def __init__(self, rules: Any, *, horizon_s: int = 900) -> None:
        self.rater = Rater(rules, horizon_s=horizon_s)
        self.use_rules(rules)

    def use_rules(self, rules: Any) -> None:
        self.rules = rules
        self.known_sites, self.known_models = frozenset(rules.site_ids), frozenset(rules.model_ids)
        self.quick = QuickParser(self.known_sites, self.known_models)
        self.rater.use_rules(rules)

    def forget(self) -> None:
        self.rater.forget()

    @property
    def state_size(self) -> int:
        return self.rater.state_size

    def rate_batch(self, items: list, *, now: datetime, lookup: Lookup | None = None,
                   timestamps: bool = False, spend_marks: SpendMarks | None = None) -> BatchResult:
        messages = expand(items)
        result = process_batch(messages, self.rater, known_sites=self.known_sites, known_models=self.known_models,
                               now=now, lookup=lookup, quick=self.quick, spend_marks=spend_marks)
        result.timestamps = [m.timestamp for m in messages] if timestamps else []
        return result
