"""The event log replayed into a scratch database, as the worker would have rated it (`gpubill verify-log`).

    readings_ends(settings)                                  {(topic, partition): end offset} of the readings topics, now
    replay_log(db, rules, settings, period, ends, progress)  -> Replayed: the log rated into `db`, the period's charges

Steps of `replay_log`, on a database of its own (never the live one):

1. Read every message of the readings topics (schemas/topics.py) from the beginning of each
   partition up to `ends` — the end offsets when verification started — outside any consumer
   group (nothing is committed, no worker's position moves), and rate them in batches through
   the worker's own classes: a `Pipeline` with the rater `best_rater` picks and the
   `ClickHouseSink`. Deduplication, conflicts (the first in partition order counts), the late
   join of energy to usage and the dead letters therefore behave as in the worker; dead letters
   are written to the scratch database only, never produced to Kafka.
2. Read gpu.corrections.v1 whole and store it (`usage.corrections.store_corrections`).
3. Apply the corrections to the period's rated data under `rules`
   (`usage.regenerate.regenerate`) — when that function is there; `Replayed.corrections_applied`
   says whether it was.
4. The period's charges per tenant, as a first invoice would carry them (billing/verify_log.py).

The rater prices every second under `rules`, the rules as they are now: a rule correction for
the past shows in the replay at once, and in the live database once the period is re-rated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Callable, Iterator

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from billing.verify_log import log_charges
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.errors import KafkaUnreachable, StreamsError
from streams.kafka.message import Message
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options

__all__ = ["Replayed", "readings_ends", "replay_log"]

READING_TOPICS = (TOPIC_USAGE, TOPIC_POWER)
BATCH_MESSAGES = 20_000
STALL_S = 120.0  # no message for this long while offsets remain: the broker stopped serving them

Ends = dict[tuple[str, int], int]


@dataclass(frozen=True)
class Replayed:
    period: str
    rules_revision: str
    messages: int  # readings messages rated (a message may hold several readings)
    corrections: int  # corrections stored (ok ones; duplicates count once)
    corrections_applied: bool  # False: usage.regenerate is not there yet, the rated data is uncorrected
    charges: dict[str, Decimal]  # tenant → the period's charges before credits and VAT


def _consumer(settings: KafkaSettings) -> KafkaConsumer:
    try:
        return KafkaConsumer(bootstrap_servers=settings.kafka.split(","), group_id=None, enable_auto_commit=False,
                             request_timeout_ms=TIMEOUT_MS + 1000, bootstrap_timeout_ms=TIMEOUT_MS,
                             max_poll_records=BATCH_MESSAGES, **client_options(settings, client="kafka-python"))
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc


def readings_ends(settings: KafkaSettings) -> Ends:
    """The end offset (the next to be written) of every partition of the readings topics, now.
    A topic that does not exist has no partitions here. KafkaUnreachable when no broker answers."""
    consumer = _consumer(settings)
    try:
        partitions = [TopicPartition(topic, p) for topic in READING_TOPICS
                      for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = consumer.end_offsets(partitions) if partitions else {}
        return {(tp.topic, tp.partition): int(end) for tp, end in ends.items()}
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    finally:
        consumer.close()


def read_readings(settings: KafkaSettings, ends: Ends) -> Iterator[list[Message]]:
    """The readings messages from the beginning of each partition up to `ends`, in batches; each
    partition in its order (what decides duplicates and conflicts)."""
    todo = {TopicPartition(topic, p): end for (topic, p), end in ends.items() if end > 0}
    if not todo:
        return
    consumer = _consumer(settings)
    try:
        consumer.assign(list(todo))
        consumer.seek_to_beginning(*todo)
        left = {tp for tp, end in todo.items() if consumer.position(tp) < end}
        last_seen = time.monotonic()
        while left:
            batch: list[Message] = []
            for tp, records in consumer.poll(timeout_ms=1000).items():
                end = todo[tp]
                batch += [Message(r.topic, r.partition, r.offset, r.key, r.value,
                                  tuple((k, v) for k, v in (r.headers or ())), r.timestamp)
                          for r in records if r.offset < end]
            for tp in list(left):
                if consumer.position(tp) >= todo[tp]:
                    left.discard(tp)
                    consumer.pause(tp)
            if batch:
                last_seen = time.monotonic()
                yield batch
            elif time.monotonic() - last_seen > STALL_S:
                raise StreamsError(f"the broker served no readings for {STALL_S:.0f} s with "
                                   f"{sorted(f'{tp.topic}[{tp.partition}]' for tp in left)} not read to their end")
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    finally:
        consumer.close()


def replay_log(db: Any, rules: Any, settings: KafkaSettings, period: str, ends: Ends, *,
               progress: Callable[[int, int], None] | None = None) -> Replayed:
    """Rate the readings log up to `ends` into `db` (a scratch database), store and apply the
    corrections, and return the period's charges per tenant (see the module docstring).
    `progress` is told (messages done, messages at most to do) after each batch."""
    from streams.kafka.corrections import read_corrections
    from streams.pipeline import Pipeline
    from streams.rating.native import best_rater
    from streams.sink import ClickHouseSink
    from usage.corrections import store_corrections

    goal = sum(ends.values())  # an upper bound: retention may have dropped a partition's start
    pipeline = Pipeline(rules=rules, sink=ClickHouseSink(db, max_wait_s=60.0), rater=best_rater(rules))
    done = 0
    try:
        for batch in read_readings(settings, ends):
            pipeline.handle(batch)
            done += len(batch)
            if progress:
                progress(done, goal)
    finally:
        pipeline.executor.shutdown()
        pipeline.writer.shutdown()
    stored, _conflicts = store_corrections(db, read_corrections(settings, int(time.time())))
    applied = _regenerate(db, rules, period)
    return Replayed(period=period, rules_revision=rules.revision, messages=done, corrections=stored,
                    corrections_applied=applied, charges=log_charges(db, rules, period))


def _regenerate(db: Any, rules: Any, period: str) -> bool:
    """Replace the period's rated data with the generation corrected under `rules`, when
    usage.regenerate is there (issue 25, item 3: being built); False when it is not."""
    try:
        from usage.regenerate import regenerate
    except ImportError:
        return False
    regenerate(db, rules, period)
    return True
