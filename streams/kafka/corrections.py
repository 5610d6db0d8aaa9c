"""Compensating events on `gpu.corrections.v1` (schemas/corrections.py): produced, and read back whole.

    ensure_corrections_topic(settings)          create it when missing (the readings' partition count, kept for ever)
    produce_correction(settings, document)      one correction, keyed by its gpu_uuid, acknowledged by all replicas
    read_corrections(settings, now_s)           every message from the beginning, each checked: [LoggedCorrection]

The topic is the log of corrections, like the readings topics are the log of usage: nothing
is edited or deleted there. Reading it back checks every message as the pipeline would — a
malformed one is listed with its reason, and an `event_id` seen before with other content is
a conflict (the first one counts); the same content again is a duplicate and counts once.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from schemas.corrections import Correction, InvalidCorrection, parse_correction
from schemas.topics import TOPIC_CORRECTIONS
from streams.errors import KafkaUnreachable
from streams.kafka.admin import ensure_topics
from streams.kafka.producers import flush_producer, make_producer
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options, consumer_options

__all__ = ["LoggedCorrection", "ensure_corrections_topic", "produce_correction", "read_corrections"]

CORRECTIONS_TOPIC_CONFIG = {"retention.ms": "-1"}  # the log of corrections is kept for ever


@dataclass(frozen=True)
class LoggedCorrection:
    """One message of the topic: the correction, or why it does not count."""

    partition: int
    offset: int
    timestamp_ms: int
    correction: Correction | None  # None: refused (reason says why), or a conflict
    status: str  # "ok" | "duplicate" | "conflict" | "invalid"
    reason: str = ""
    raw: bytes = b""


def ensure_corrections_topic(settings: KafkaSettings) -> None:
    ensure_topics(settings.kafka, {TOPIC_CORRECTIONS: settings.partitions},
                  options=client_options(settings, client="kafka-python"),
                  configs={TOPIC_CORRECTIONS: CORRECTIONS_TOPIC_CONFIG})


def produce_correction(settings: KafkaSettings, document: dict) -> None:
    """Produce `document` (an already checked correction) keyed by its card; waits for the acknowledgement."""
    ensure_corrections_topic(settings)
    producer = make_producer(settings)
    try:
        producer.send(TOPIC_CORRECTIONS, key=document["gpu_uuid"].encode(), value=orjson.dumps(document))
        flush_producer(producer, settings)
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    finally:
        producer.close(timeout=5)


def read_corrections(settings: KafkaSettings, now_s: int) -> list[LoggedCorrection]:
    """Every message of the topic, oldest first per partition, each checked (see the module docstring)."""
    ensure_corrections_topic(settings)
    try:
        consumer = KafkaConsumer(bootstrap_servers=settings.kafka.split(","), enable_auto_commit=False,
                                 request_timeout_ms=TIMEOUT_MS + 1000, bootstrap_timeout_ms=TIMEOUT_MS,
                                 consumer_timeout_ms=2000, **consumer_options(settings, client="kafka-python"))
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    try:
        partitions = [TopicPartition(TOPIC_CORRECTIONS, p)
                      for p in sorted(consumer.partitions_for_topic(TOPIC_CORRECTIONS) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        messages = []
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            batch = consumer.poll(timeout_ms=1000)
            for records in batch.values():
                messages += records
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    finally:
        consumer.close()
    messages.sort(key=lambda m: (m.timestamp, m.partition, m.offset))
    return _checked(messages, now_s)


def _checked(messages: list, now_s: int) -> list[LoggedCorrection]:
    seen: dict[str, bytes] = {}
    out = []
    for message in messages:
        value = message.value or b""
        try:
            correction = parse_correction(value, now_s)
        except InvalidCorrection as exc:
            out.append(LoggedCorrection(message.partition, message.offset, message.timestamp, None, "invalid",
                                        str(exc), value))
            continue
        content = correction.model_dump_json(by_alias=True).encode()
        first = seen.setdefault(correction.event_id, content)
        if first != content:
            out.append(LoggedCorrection(message.partition, message.offset, message.timestamp, None, "conflict",
                                        f"event_id {correction.event_id} was first used with other content", value))
        else:
            status = "ok" if first is content else "duplicate"
            out.append(LoggedCorrection(message.partition, message.offset, message.timestamp, correction, status,
                                        "" if status == "ok" else "the same correction again: counted once", value))
    return out
