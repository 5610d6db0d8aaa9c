"""The adapter to aiokafka's internals: fetched Kafka records as whole record sets, not one
Python object per record. No other module touches aiokafka's private names.

A plain aiokafka consumer turns every record into a `ConsumerRecord` (≈ 2.5 µs of CPU in
the event-loop thread, holding the GIL, and as much again to free it): at 100,000 readings
a second that alone fills a core. The worker's consumer instead asks for `RECORD_SETS`
as its value deserializer, and each partition's fetched bytes come out of `getmany` as
one `RecordSet`: the native core reads the records in place (native/src/records.rs), and
only what Python must judge itself becomes a `Message`.

How: aiokafka's fetcher builds a `PartitionRecords` per fetched partition, from a
`MemoryRecords` over the fetched bytes. `install()` replaces both names in
`aiokafka.consumer.fetcher` (a private module: aiokafka is pinned in pyproject.toml)
with subclasses that keep the bytes and, for a consumer whose value deserializer is
`RECORD_SETS` only, yield one `RecordSet` per fetch. The rest is as aiokafka does it:
control batches are skipped, the position moves to the offset after the last whole batch,
as `PartitionRecords` does record by record, and every batch's CRC is checked by whoever
decodes it.

Read committed (every consumer of gpubill's, streams/kafka/settings.py): the broker sends
nothing past the last stable offset, and with each fetch the aborted transactions among its
offsets. None listed — the normal case — the fetch goes on whole, as read uncommitted: its
only transactional extras are markers (control batches), which every reader skips, the
native core too (native/src/records.rs). Otherwise the set is rebuilt from the batches
aiokafka would not skip (`_aborted`: its own test, batch by batch, CRC first): a copy of
the fetch's bytes, and a rare one. A fetch with nothing left to read (markers, aborted
batches) is still a set: it carries the position past them, to be committed, so that a
drain reaches its end offsets.

Who decodes: the native core as it reads a plain set (with the CPU's CRC-32C instruction),
`messages_of` for the others. Sets with a compressed or pre-v2 batch are marked
`plain=False` and decoded by aiokafka in Python (`messages_of`), slower but the same.

Start-up self-check: `install()` first drives the subclasses once as aiokafka's fetcher
drives them, over batches built here (`self_check`): plain ones, and read committed a
committed and an aborted transaction, compared with what aiokafka's own consumer yields.
If an aiokafka upgrade no longer fits, nothing is patched: the consumer then hands on
ordinary records (the slow path, same results), the worker logs why at ERROR and exports
gpubill_fast_record_sets 0, and tests/unit/test_records.py fails.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass

from aiokafka.codec import gzip_encode
from aiokafka.consumer import fetcher as _fetcher
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import _DefaultRecordBatchBuilderPy  # its C twin ignores offsets
from aiokafka.record.memory_records import MemoryRecords

from streams.kafka.message import Message

log = logging.getLogger("gpubill.feeder")


def RECORD_SETS(value: bytes) -> bytes:  # noqa: N802 - a marker, named like a constant
    """The value deserializer that asks for whole record sets (see the module docstring)."""
    return value


@dataclass(frozen=True, slots=True)
class RecordSet:
    """A partition's fetched records: `data` holds whole v2 record batches; the records at
    offsets from `start` are this consumer's; `next_offset` is where the next fetch starts."""

    topic: str
    partition: int
    data: bytes
    start: int
    next_offset: int
    plain: bool  # every batch is v2 and uncompressed: the native core reads it in place


def messages_of(records: RecordSet) -> list[Message]:
    """The records of a set as `Message`s, decoded by aiokafka (any format, any compression),
    after checking each batch's CRC."""
    out: list[Message] = []
    batches = MemoryRecords(records.data)
    while batches.has_next():
        batch = batches.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise CorruptRecordException(f"Invalid CRC - {records.topic}:{records.partition}")
        if getattr(batch, "is_control_batch", False):
            continue
        for record in batch:
            if record.offset >= records.start:
                out.append(Message(records.topic, records.partition, record.offset, record.key, record.value,
                                   tuple(record.headers), record.timestamp or 0))
    return out


def expand(items: list) -> list[Message]:
    """A fed batch's items — `Message`s and `RecordSet`s — as `Message`s."""
    out: list[Message] = []
    for item in items:
        if isinstance(item, RecordSet):
            out += messages_of(item)
        else:
            out.append(item)
    return out


class _KeptMemoryRecords:
    """aiokafka's MemoryRecords, keeping the fetched bytes for a `RecordSet`."""

    __slots__ = ("data", "_records")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self._records = MemoryRecords(data)

    def has_next(self) -> bool:
        return self._records.has_next()

    def size_in_bytes(self) -> int:
        return self._records.size_in_bytes()

    def next_batch(self):
        return self._records.next_batch()


_LOG_OVERHEAD = 12  # every batch, of any format, starts: base offset (i64), length of the rest (i32)


class _PartitionRecords(_fetcher.PartitionRecords):
    """aiokafka's PartitionRecords; one `RecordSet` per fetch for a `RECORD_SETS` consumer."""

    def _unpack_records(self):
        if self._value_deserializer is not RECORD_SETS:
            yield from super()._unpack_records()
            return
        start, records = self.next_fetch_offset, self._records
        data = records.data
        # Read committed, the broker lists the aborted transactions among the fetched offsets;
        # none listed (the normal case): the set goes on whole, as read uncommitted.
        filtering = self._isolation_level == _fetcher.READ_COMMITTED and bool(self._aborted_transactions)
        kept: list[tuple[int, int]] = []  # byte spans of the batches handed on, when filtering
        at, plain = 0, True
        while records.has_next():
            batch = records.next_batch()
            self.next_fetch_offset = max(self.next_fetch_offset, batch.next_offset)
            if filtering:
                begin, at = at, at + _LOG_OVERHEAD + int.from_bytes(data[at + 8:at + _LOG_OVERHEAD], "big")
                if self._aborted(batch) or batch.is_control_batch:  # (markers: nothing to read)
                    continue
                kept.append((begin, at))
            if plain and not batch.is_control_batch:
                plain = getattr(batch, "magic", 0) == 2 and batch.compression_type == 0
        if filtering:
            data = b"".join(data[begin:end] for begin, end in kept)
        # A set even when nothing is left of the fetch (markers, aborted batches): it carries
        # the position past them, to be committed, and a drain reaches the end offsets.
        yield RecordSet(self._tp.topic, self._tp.partition, data, start, self.next_fetch_offset, plain)

    def _aborted(self, batch) -> bool:
        """Whether `batch` belongs to an aborted transaction: aiokafka's own test, step for step
        (`PartitionRecords._unpack_records`, read committed), with its CRC checked first, as there."""
        if self._check_crcs and not batch.validate_crc():
            raise CorruptRecordException(f"Invalid CRC - {self._tp}")
        if batch.producer_id is None:
            return False
        self._consume_aborted_up_to(batch.base_offset)
        if batch.is_control_batch and self._contains_abort_marker(batch):
            self._aborted_producers.discard(batch.producer_id)
        return bool(batch.is_transactional and batch.producer_id in self._aborted_producers)


@dataclass(frozen=True)
class FastPath:
    """Whether the record-set path is in use, and if not, why."""

    active: bool
    reason: str = ""


# The fetcher's names the subclasses stand in for, and PartitionRecords' constructor as
# aiokafka's fetcher calls it.
_EXPECTED_PARAMETERS = ("tp", "records", "aborted_transactions", "fetch_offset", "key_deserializer",
                        "value_deserializer", "check_crcs", "isolation_level")
_status: FastPath | None = None


def self_check() -> FastPath:
    """Drive `_PartitionRecords` once as aiokafka's fetcher does, over known batches — plain
    ones, and (read committed) a committed and an aborted transaction — and check what a
    `RECORD_SETS` consumer and an ordinary one receive."""
    try:
        for name in ("PartitionRecords", "MemoryRecords", "READ_UNCOMMITTED", "READ_COMMITTED"):
            if not hasattr(_fetcher, name):
                return FastPath(False, f"aiokafka.consumer.fetcher has no {name}")
        parameters = tuple(inspect.signature(_fetcher.PartitionRecords.__init__).parameters)[1:]
        if parameters != _EXPECTED_PARAMETERS:
            return FastPath(False, f"PartitionRecords takes {parameters}, expected {_EXPECTED_PARAMETERS}")
        data = record_batch(7, [(7, b"k", b"a", 1, []), (8, b"k", b"b", 2, [])]) + record_batch(9, [(9, b"k", b"c", 3, [])])

        def unpack(data, deserializer, isolation=_fetcher.READ_UNCOMMITTED, aborted=(), fetch_offset=8):
            records = _PartitionRecords(_SelfCheckPartition, _KeptMemoryRecords(data), list(aborted), fetch_offset,
                                        None, deserializer, True, isolation)
            return list(records), records.next_fetch_offset

        (whole,), position = unpack(data, RECORD_SETS)
        expected = RecordSet("self-check", 0, data, 8, 10, True)
        if whole != expected or position != 10:
            return FastPath(False, f"a fetch gave {whole!r} at position {position}, expected {expected!r} at 10")
        if [(m.offset, m.value) for m in messages_of(whole)] != [(8, b"b"), (9, b"c")]:
            return FastPath(False, "the records of a set decode to other offsets or values")
        plain, position = unpack(data, lambda value: value)
        if [(r.offset, r.value) for r in plain] != [(8, b"b"), (9, b"c")] or position != 10:
            return FastPath(False, "an ordinary consumer no longer gets one record per message")
        # Read committed: producer 5's transaction (offsets 0–1) commits at 2; no aborted one
        # listed, the fetch goes on whole.
        transaction = (record_batch(0, [(0, b"k", b"t0", 1, []), (1, b"k", b"t1", 1, [])], producer_id=5,
                                    transactional=True) + marker_batch(2, 5, commit=True))
        (whole,), position = unpack(transaction, RECORD_SETS, _fetcher.READ_COMMITTED, [], 0)
        if whole != RecordSet("self-check", 0, transaction, 0, 3, True) or position != 3:
            return FastPath(False, f"a read-committed fetch with no aborted transaction gave {whole!r} at "
                                   f"position {position}, not the fetch whole at 3")
        # Then producer 6's (3–4) aborts at 5 and a plain batch follows at 6; the broker lists
        # producer 6's as aborted. The set holds what aiokafka's own consumer yields.
        data = (transaction + record_batch(3, [(3, b"k", b"x3", 1, []), (4, b"k", b"x4", 1, [])], producer_id=6,
                                           transactional=True)
                + marker_batch(5, 6, commit=False) + record_batch(6, [(6, b"k", b"p6", 1, [])]))
        committed = [(0, b"t0"), (1, b"t1"), (6, b"p6")]
        plain, position = unpack(data, lambda value: value, _fetcher.READ_COMMITTED, [(6, 3)], 0)
        if [(r.offset, r.value) for r in plain] != committed or position != 7:
            return FastPath(False, "aiokafka's own read-committed consumer no longer skips an aborted transaction")
        (filtered,), position = unpack(data, RECORD_SETS, _fetcher.READ_COMMITTED, [(6, 3)], 0)
        if [(m.offset, m.value) for m in messages_of(filtered)] != committed or position != 7 or not filtered.plain:
            return FastPath(False, f"a read-committed fetch with an aborted transaction gave {filtered!r} "
                                   f"at position {position}, not the committed records at 7")
    except Exception as exc:  # noqa: BLE001 - whatever broke, the answer is "does not fit"
        return FastPath(False, f"{type(exc).__name__}: {exc}")
    return FastPath(True)


class _SelfCheckPartition:
    topic, partition = "self-check", 0


def install() -> FastPath:
    """Let `RECORD_SETS` consumers of this process receive record sets, if the installed
    aiokafka still fits (see the module docstring); idempotent. Returns the outcome."""
    global _status
    if _status is None:
        _status = self_check()
        if _status.active:
            _fetcher.MemoryRecords = _KeptMemoryRecords
            _fetcher.PartitionRecords = _PartitionRecords
            log.info("record-set fetch path active (aiokafka fits the adapter)")
        else:
            log.error("record-set fetch path OFF, consuming record by record (slower, same results): "
                      "the installed aiokafka no longer fits streams/kafka/record_sets.py: %s", _status.reason)
    return _status


# -- writing batches (for tests, the self-check and `gpubill bench rating`) ------------------------------

_GZIP = 1


class _Builder(_DefaultRecordBatchBuilderPy):
    control = False  # a transaction marker (only brokers write them)

    def _get_attributes(self, include_compression_type: bool = True) -> int:
        return super()._get_attributes(include_compression_type) | (self.CONTROL_MASK if self.control else 0)

    def _maybe_compress(self) -> bool:
        """Compress even when it does not pay: aiokafka sends a small batch uncompressed."""
        if self._compression_type != _GZIP:
            return False
        header = self.HEADER_STRUCT.size
        self._buffer[header:] = gzip_encode(bytes(self._buffer[header:]))
        return True


def record_batch(base: int, records: list[tuple], *, gzip: bool = False, producer_id: int = -1,
                 transactional: bool = False) -> bytes:
    """One v2 record batch of `records` — (offset, key, value, timestamp, headers) — at base
    offset `base` (offsets ≥ base), as a broker sends it in a fetch (the broker writes the
    base offset, outside the CRC); `transactional` with `producer_id`: a transaction's batch."""
    builder = _Builder(magic=2, compression_type=_GZIP if gzip else 0, is_transactional=int(transactional),
                       producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                       base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 20)
    for offset, key, value, timestamp, headers in records:
        builder.append(offset - base, timestamp=timestamp, key=key, value=value, headers=list(headers))
    data = bytearray(builder.build())
    data[:8] = base.to_bytes(8, "big")
    return bytes(data)


def marker_batch(offset: int, producer_id: int, *, commit: bool) -> bytes:
    """The control batch that ends producer `producer_id`'s transaction at `offset`, as the
    broker writes it: one record, key (version 0, type 1 commit / 0 abort), value (version 0,
    coordinator epoch 0)."""
    builder = _Builder(magic=2, compression_type=0, is_transactional=1, producer_id=producer_id, producer_epoch=0,
                       base_sequence=-1, batch_size=1 << 10)
    builder.control = True
    builder.append(0, timestamp=0, key=(0).to_bytes(2, "big") + int(commit).to_bytes(2, "big"),
                   value=bytes(6), headers=[])
    data = bytearray(builder.build())
    data[:8] = offset.to_bytes(8, "big")
    return bytes(data)
