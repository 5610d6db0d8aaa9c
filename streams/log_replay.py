"""The event log replayed into a scratch database, as the worker would have rated it (`gpubill verify-log`).

    readings_ends(settings)                                  {(topic, partition): end offset} of the readings topics, now
    replay_log(db, rules, settings, period, ends, progress)  -> Replayed: the log rated into `db`, the period's charges
    rate_readings(db, rules, settings, ends, progress)       -> messages: its step 1 alone (gpubill rebuild)

Steps of `replay_log`, on a database of its own (never the live one):

1. Read every message of the readings topics (schemas/topics.py) from the beginning of each
   partition up to `ends` — the end offsets when verification started — outside any consumer
   group (nothing is committed, no worker's position moves), and rate them in batches through
   the worker's own classes: a `Pipeline` with the rater `best_rater` picks and the
   `ClickHouseSink`. Deduplication, conflicts (the first in partition order counts), the late
   join of energy to usage and the dead letters therefore behave as in the worker; dead letters
   are written to the scratch database only, never produced to Kafka.
2. Read gpu.corrections.v1 whole and take it in as the worker does (streams/corrections_sync.py:
   stored, conflicts recorded, malformed ones and those of unknown cards dead-lettered), after
   the readings, whose cards it checks.
3. Apply the corrections to the period's rated data under `rules` (`usage.regenerate.regenerate`,
   what `gpubill rerate --apply` switches the live period to).
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
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, consumer_options

__all__ = ["LogTruncated", "Replayed", "rate_readings", "readings_ends", "replay_log"]

READING_TOPICS = (TOPIC_USAGE, TOPIC_POWER)
BATCH_MESSAGES = 20_000
STALL_S = 120.0  # no message for this long while offsets remain: the broker stopped serving them

Ends = dict[tuple[str, int], int]


class LogTruncated(StreamsError):
    """A readings partition no longer starts at offset 0: retention dropped part of the log,
    so no replay of it can prove a period (any of the dropped messages may have been its)."""


@dataclass(frozen=True)
class Replayed:
    period: str
    rules_revision: str
    messages: int  # readings messages rated (a message may hold several readings)
    corrections: int  # corrections stored (ok ones; duplicates count once)
    corrections_applied: int  # of them, those touching the period (applied to its rated data)
    charges: dict[str, Decimal]  # tenant → the period's charges before credits and VAT


def _consumer(settings: KafkaSettings) -> KafkaConsumer:
    try:
        return KafkaConsumer(bootstrap_servers=settings.kafka.split(","), group_id=None, enable_auto_commit=False,
                             request_timeout_ms=TIMEOUT_MS + 1000, bootstrap_timeout_ms=TIMEOUT_MS,
                             max_poll_records=BATCH_MESSAGES, **consumer_options(settings, client="kafka-python"))
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc


def readings_ends(settings: KafkaSettings) -> Ends:
    """The end offset (the next to be written) of every partition of the readings topics, now.
    A topic that does not exist has no partitions here. KafkaUnreachable when no broker answers;
    LogTruncated when a partition's log no longer starts at offset 0."""
    consumer = _consumer(settings)
    try:
        partitions = [TopicPartition(topic, p) for topic in READING_TOPICS
                      for p in sorted(consumer.partitions_for_topic(topic) or ())]
        if not partitions:
            return {}
        starts, ends = consumer.beginning_offsets(partitions), consumer.end_offsets(partitions)
        dropped = sorted(f"{tp.topic}[{tp.partition}] starts at offset {starts[tp]}" for tp in partitions if starts[tp])
        if dropped:
            raise LogTruncated(f"the readings log is not whole ({'; '.join(dropped[:3])}): retention dropped its "
                               "oldest messages, so a replay cannot prove any period; keep the readings topics for "
                               "ever (retention.ms=-1, as deploy/kafka does)")
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
    from streams.corrections_sync import sync_corrections

    done = rate_readings(db, rules, settings, ends, progress=progress)
    synced = sync_corrections(db, settings, int(time.time()))  # after the readings: it checks their cards
    applied = _regenerate(db, rules, period)
    return Replayed(period=period, rules_revision=rules.revision, messages=done, corrections=len(synced.stored),
                    corrections_applied=applied, charges=log_charges(db, rules, period))


def rate_readings(db: Any, rules: Any, settings: KafkaSettings, ends: Ends, *,
                  progress: Callable[[int, int], None] | None = None) -> int:
    """Step 1: the readings log up to `ends` rated into `db` through the worker's own classes;
    returns the messages rated. `progress` is told (messages done, messages at most to do) after each batch."""
    from streams.pipeline import Pipeline
    from streams.rating.native import best_rater
    from streams.sink import ClickHouseSink

    goal = sum(ends.values())  # every partition starts at 0 (readings_ends checked)
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
    return done


def _regenerate(db: Any, rules: Any, period: str) -> int:
    """Replace the period's rated data with the generation corrected and priced under `rules`;
    returns the corrections that touch it. A scratch database has no invoices: no lease needed."""
    from usage.regenerate import RegenerateRefused, regenerate

    try:
        return regenerate(db, rules, period).corrections
    except RegenerateRefused as exc:
        raise StreamsError(f"the replay of {period} could not apply its corrections: {exc}") from exc
