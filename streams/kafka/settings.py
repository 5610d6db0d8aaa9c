"""What the streams package reads of the settings — the shell's `gpubill.config.Settings`
satisfies `KafkaSettings`, and tests may pass any object with these attributes — and the
time bound of its own Kafka client calls."""

from __future__ import annotations

from typing import Protocol

# Every Kafka client call of gpubill's own is bounded by this: an unreachable broker is a
# clear error (streams.errors.KafkaUnreachable), never a hang.
TIMEOUT_MS = 10_000


class KafkaSettings(Protocol):
    kafka: str  # bootstrap servers, "host:port[,host:port]"
    group: str  # consumer group of the workers
    partitions: int  # partitions of the topics gpubill creates
