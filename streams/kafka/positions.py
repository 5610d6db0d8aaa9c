"""Where a fed batch came from: the offsets it spans, partition by partition.

A `Batch` (streams/kafka/feeder.py) records them as it is made, from its messages' own
offsets, before the rater takes the messages; the sink names every insert of the batch by
them (streams/sink.py: its deduplication tokens). Pure data: no Kafka client here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from streams.kafka.record_sets import RecordSet


@dataclass(frozen=True)
class Positions:
    """Sorted (topic, partition, first offset, last offset), one per partition of the batch.

    For a record set, `first` is where its fetch started and `last` the offset before the next
    fetch's (markers and aborted records between them included: they are part of what the
    batch consumed); for a single message, its offset."""

    spans: tuple[tuple[str, int, int, int], ...] = ()

    @classmethod
    def of(cls, messages: Iterable) -> "Positions":
        """The positions of fed items (`RecordSet`s and `Message`s, in any order)."""
        spans: dict[tuple[str, int], tuple[int, int]] = {}
        for m in messages:
            first, last = (m.start, m.next_offset - 1) if isinstance(m, RecordSet) else (m.offset, m.offset)
            at = (m.topic, m.partition)
            if at in spans:
                first, last = min(first, spans[at][0]), max(last, spans[at][1])
            spans[at] = (first, last)
        return cls(tuple(sorted((topic, partition, first, last) for (topic, partition), (first, last) in spans.items())))

    def __str__(self) -> str:
        """`topic/partition/first-last` joined by commas: the same positions, the same text."""
        return ",".join(f"{topic}/{partition}/{first}-{last}" for topic, partition, first, last in self.spans)
