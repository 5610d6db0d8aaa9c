"""One Kafka record as the pipeline sees it: the transport type between Kafka and rating."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Message:
    """The fields of aiokafka's ConsumerRecord that the pipeline uses."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: int = 0  # Kafka record timestamp in ms (producer's create time), for freshness
