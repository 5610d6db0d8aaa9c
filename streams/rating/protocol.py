"""The batch protocol: what the worker, the sink and the feeder know of a rater.

A rater takes a fed batch — `Message`s and `RecordSet`s of the reading topics — and
returns a `BatchResult`: the hot tables' rows already encoded as Native blocks, the
conflicts, the dead letters, and the positions read. Two raters implement it:

    streams/rating/native.py           NativeRater: the Rust core (native/), the fast path
    streams/rating/reference_batch.py  PythonRater: the readable reference it is held to
                                       (tests/unit/test_native_core.py: same blocks)

`best_rater` (streams/rating/native.py) picks one at start-up; nothing after that asks
which one it holds.

Spend. Given `spend_marks`, a rater also returns the batch's `SpendContributions`: what its
rated rows add to each tenant's rented seconds and IT energy, per (tenant, source
partition) and price, leaving out what an earlier worker already counted. The marks are
that worker's consumed positions on the partition (usage next offset, power next offset)
when it produced the tenant's cumulative; `counts_rent` and `counts_energy` are the rule.
Without marks (None) a rater does none of this work and `BatchResult.spend` is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Callable, Mapping, Protocol

from streams.deadletters import DeadLetter

# (usage keys, power keys) → (stored usage rows, stored power rows); see streams/lookup.py.
Lookup = Callable[[set, set], tuple[list[tuple], list[tuple]]]


# (tenant, partition) → (usage next offset, power next offset) already counted; a missing mark is (0, 0).
SpendMarks = Mapping[tuple[str, int], tuple[int, int]]
# (tenant, partition, period, gpu_model, plan, list_price, per_s, discount_pct)
RentSpendKey = tuple[str, int, str, str, str, Decimal, int, Decimal]
# (tenant, partition, period, site, band, tariff_per_kwh, pue)
EnergySpendKey = tuple[str, int, str, str, str, Decimal, Decimal]


@dataclass
class SpendContributions:
    """What a batch adds to tenants' spend, in exact quantities, keyed by everything the
    price depends on (so the tracker prices them without the readings).

    `rent`: {RentSpendKey: rented seconds}, one second per rent row (a usage reading with a
    tenant). `energy`: {EnergySpendKey: IT energy in mJ}, a joined energy row's power_mw over
    its one second. `partition` is the row's: the usage reading's for rent, the power
    reading's for energy (the topics are partitioned alike, by card). Prices are the rate's
    values (Decimals equal to the rule's). Keys with a zero quantity are left out.
    """

    rent: dict[RentSpendKey, int] = field(default_factory=dict)
    energy: dict[EnergySpendKey, int] = field(default_factory=dict)


def counts_rent(marks: SpendMarks, tenant: str | None, partition: int, usage_offset: int) -> bool:
    """Whether a rent row caused by the usage reading at `usage_offset` of `partition` counts:
    it has a tenant and the reading lies at or past the usage mark of (tenant, partition)."""
    return bool(tenant) and usage_offset >= marks.get((tenant, partition), (0, 0))[0]


def counts_energy(marks: SpendMarks, tenant: str | None, partition: int, usage_offset: int | None,
                  power_offset: int) -> bool:
    """Whether an energy row counts: it is joined (it has a tenant: the usage reading's,
    read at `usage_offset`) and not both readings lie below the marks of (tenant, partition).
    Whichever reading came second emitted the join, so one of them past its mark means the
    join was not yet counted."""
    if not tenant or usage_offset is None:
        return False
    usage_mark, power_mark = marks.get((tenant, partition), (0, 0))
    return not (usage_offset < usage_mark and power_offset < power_mark)


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
    spend: SpendContributions | None = None  # when asked with spend marks
    rules_revision: str = ""  # the rules that priced it (RuleSet.revision), set by the pipeline


class BatchRater(Protocol):
    """Validate, deduplicate, attribute and price whole batches, holding state between them."""

    kind: str  # "native" or "python", for logs and the bench
    state_size: int  # readings held in the dedupe horizon, as of the last batch
    state_bytes: int | None  # the memory they take, when the rater can measure it

    def rate_batch(self, items: list, *, now: datetime, lookup: Lookup | None = None,
                   timestamps: bool = False, spend_marks: SpendMarks | None = None) -> BatchResult:
        """Rate a fed batch; `lookup` answers for readings no longer (or never) held in
        memory; with `timestamps` the result carries every record's Kafka timestamp; with
        `spend_marks` (maybe empty) its `spend` holds the batch's contributions counted past
        them (None: no spend work at all)."""

    def use_rules(self, rules: Any) -> None:
        """Price from now on with `rules` (already validated as a whole)."""

    def forget(self) -> None:
        """Drop the state (partitions were revoked): what is needed again is read back."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)
