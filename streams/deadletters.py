"""Refused input: a message (or one element of a batched message) with the reason why.

A dead letter is both a Kafka record on gpu.deadletter.v1 (the original bytes, with the
headers of schemas/topics.py) and a row of the ClickHouse table `deadletters`; one read
back from the topic (e.g. refused by `gpubill replay`) becomes the same row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from schemas.topics import (
    H_INDEX, H_LINE, H_OFFSET, H_PARTITION, H_REASON, H_TOPIC, H_TRUNCATED, MAX_DEADLETTER_VALUE,
)
from streams.kafka.message import Message


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
        """The `deadletters` row (schemas.tables.DEADLETTERS order)."""
        original = self.message.value or b""  # bytes: ClickHouse String keeps them exactly, UTF-8 or not
        return (self.message.topic, self.message.partition, self.message.offset, self.line, self.index, self.reason,
                original, now)


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
