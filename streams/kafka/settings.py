"""What the streams package reads of the settings: the shell's `gpubill.config.Settings`
satisfies this, and tests may pass any object with these attributes."""

from __future__ import annotations

from typing import Protocol


class KafkaSettings(Protocol):
    kafka: str  # bootstrap servers, "host:port[,host:port]"
    group: str  # consumer group of the workers
    partitions: int  # partitions of the topics gpubill creates
