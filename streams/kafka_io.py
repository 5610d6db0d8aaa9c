"""Kafka at the edges of the pipeline: producers, topics, and the end offsets of a drain.

kafka-python errors are translated here into `KafkaUnreachable` with what to do; every
call is bounded in time so that an unreachable broker is a clear error, never a hang.
"""

from __future__ import annotations

from typing import Iterable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from gpubill.config import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE, Settings
from gpubill.kafka_local import KafkaUnreachable, ensure_topics

TIMEOUT_MS = 10_000


def ensure_pipeline_topics(settings: Settings) -> None:
    """Create the readings and dead-letter topics when missing (replication 1 locally)."""
    ensure_topics(
        settings.kafka,
        {TOPIC_USAGE: settings.partitions, TOPIC_POWER: settings.partitions, TOPIC_DEADLETTER: settings.partitions},
    )


def make_producer(settings: Settings) -> KafkaProducer:
    """A producer that waits for all replicas and batches for throughput."""
    try:
        return KafkaProducer(
            bootstrap_servers=settings.kafka.split(","),
            acks="all",
            linger_ms=20,
            batch_size=256 * 1024,
            compression_type=None,
            max_block_ms=TIMEOUT_MS,
            request_timeout_ms=TIMEOUT_MS,
            bootstrap_timeout_ms=TIMEOUT_MS,
        )
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc


def flush_producer(producer: KafkaProducer, settings: Settings, timeout_s: float = 60.0) -> None:
    try:
        producer.flush(timeout=timeout_s)
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, f"messages not acknowledged: {exc}") from exc


def group_offsets(settings: Settings, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) → (the group's committed offset, end offset) for every partition."""
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=settings.kafka.split(","),
            group_id=settings.group,
            enable_auto_commit=False,
            request_timeout_ms=TIMEOUT_MS + 1000,
            bootstrap_timeout_ms=TIMEOUT_MS,
        )
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    try:
        partitions = []
        for topic in topics:
            ids = consumer.partitions_for_topic(topic) or set()
            partitions += [TopicPartition(topic, p) for p in sorted(ids)]
        ends = consumer.end_offsets(partitions) if partitions else {}
        return {(tp.topic, tp.partition): (consumer.committed(tp) or 0, ends[tp]) for tp in partitions}
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    finally:
        consumer.close()


def drain_targets(settings: Settings, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) → (committed offset, end offset), for partitions where the group is behind."""
    return {tp: (committed, end) for tp, (committed, end) in group_offsets(settings, topics).items() if end > committed}
