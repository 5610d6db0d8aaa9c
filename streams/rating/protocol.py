"""The batch protocol: what the worker, the sink and the feeder know of a rater.

A rater takes a fed batch — `Message`s and `RecordSet`s of the reading topics — and
returns a `BatchResult`: the hot tables' rows already encoded as Native blocks, the
conflicts, the dead letters, and the positions read. Two raters implement it:

    streams/rating/native.py           NativeRater: the Rust core (native/), the fast path
    streams/rating/reference_batch.py  PythonRater: the readable reference it is held to
                                       (tests/unit/test_native_core.py: same blocks)

`best_rater` (streams/rating/native.py) picks one at start-up; nothing after that asks
which one it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Protocol

from streams.deadletters import DeadLetter

# (usage keys, power keys) → (stored usage rows, stored power rows); see streams/lookup.py.
Lookup = Callable[[set, set], tuple[list[tuple], list[tuple]]]


class RatedBatch(Protocol):
    """What a rated batch writes, as the sink and the metrics read it."""

    blocks: dict[str, tuple[bytes, int]]  # {hot table: (Native block, rows)}
    conflicts: list[tuple]  # schemas.tables.CONFLICTS order, written plainly (rare)
    duplicates: int
    unallocated: int  # energy rows without a tenant (yet)
    row_count: int  # rows in the blocks
    hours: list[tuple[str, int]]  # (period, UTC hour start) of the rated rows, once each


@dataclass
class EncodedOutcome:
    """A `RatedBatch` whose blocks the Rust core already encoded (or an empty one)."""

    blocks: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    conflicts: list[tuple] = field(default_factory=list)  # schemas.tables.CONFLICTS order
    duplicates: int = 0
    unallocated: int = 0  # energy rows without a tenant (yet)
    hours: list[tuple[str, int]] = field(default_factory=list)  # (period, UTC hour) of the rated rows

    @property
    def row_count(self) -> int:
        return sum(rows for _, rows in self.blocks.values())


@dataclass
class BatchResult:
    outcome: RatedBatch = field(default_factory=EncodedOutcome)
    deadletters: list[DeadLetter] = field(default_factory=list)
    readings_in: dict[str, int] = field(default_factory=dict)
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, partition) → next offset
    timestamps: list[int] = field(default_factory=list)  # of every record, in ms, when asked (freshness)


class BatchRater(Protocol):
    """Validate, deduplicate, attribute and price whole batches, holding state between them."""

    kind: str  # "native" or "python", for logs and the bench
    state_size: int  # readings held in the dedupe horizon, as of the last batch
    state_bytes: int | None  # the memory they take, when the rater can measure it

    def rate_batch(self, items: list, *, now: datetime, lookup: Lookup | None = None,
                   timestamps: bool = False) -> BatchResult:
        """Rate a fed batch; `lookup` answers for readings no longer (or never) held in
        memory; with `timestamps` the result carries every record's Kafka timestamp."""

    def use_rules(self, rules: Any) -> None:
        """Price from now on with `rules` (already validated as a whole)."""

    def forget(self) -> None:
        """Drop the state (partitions were revoked): what is needed again is read back."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
