"""Record sets (streams/records.py): what the worker's consumer hands on instead of records.

Batches are built with aiokafka's own (pure-Python) builder (`streams.kafka.record_sets.record_batch`);
`_PartitionRecords` is driven as aiokafka's fetcher drives it.
"""

from __future__ import annotations

import pytest
from aiokafka.consumer.fetcher import READ_UNCOMMITTED
from aiokafka.errors import CorruptRecordException
from aiokafka.structs import TopicPartition

from streams.kafka.record_sets import RECORD_SETS, RecordSet, _KeptMemoryRecords, _PartitionRecords, messages_of, record_batch

TP = TopicPartition("gpu.power.v1", 3)


def batch(base: int, values: list[bytes], gzip: bool = False) -> bytes:
    return record_batch(base, [(base + delta, b"k", value, 1_000 + delta, [("h", b"v")])
                               for delta, value in enumerate(values)], gzip=gzip)


def unpack(data: bytes, fetch_offset: int, deserializer=RECORD_SETS) -> list:
    records = _PartitionRecords(TP, _KeptMemoryRecords(data), [], fetch_offset, None, deserializer, True,
                                READ_UNCOMMITTED)
    return list(records), records.next_fetch_offset


def test_a_fetch_is_one_record_set_and_the_position_moves_past_its_last_batch() -> None:
    data = batch(10, [b"a", b"b"]) + batch(12, [b"c"])
    (got,), position = unpack(data, fetch_offset=11)  # the broker sends the batch holding offset 11 whole
    assert got == RecordSet(TP.topic, TP.partition, data, start=11, next_offset=13, plain=True)
    assert position == 13
    assert [(m.offset, m.value, m.timestamp, m.headers) for m in messages_of(got)] == [
        (11, b"b", 1_001, (("h", b"v"),)), (12, b"c", 1_000, (("h", b"v"),))]


def test_a_compressed_batch_makes_the_set_one_for_python_to_decode() -> None:
    (got,), _ = unpack(batch(0, [b"a"]) + batch(1, [b"b"], gzip=True), fetch_offset=0)
    assert not got.plain
    assert [m.value for m in messages_of(got)] == [b"a", b"b"]


def test_other_consumers_still_get_one_record_each() -> None:
    got, position = unpack(batch(5, [b"a", b"b"]), fetch_offset=5, deserializer=None)
    assert [(r.offset, r.value) for r in got] == [(5, b"a"), (6, b"b")] and position == 7


def test_a_corrupt_batch_is_refused_by_whoever_decodes_it() -> None:
    data = bytearray(batch(0, [b"a", b"b"], gzip=True))
    data[-1] ^= 1
    (got,), _ = unpack(bytes(data), fetch_offset=0)
    with pytest.raises(CorruptRecordException):
        messages_of(got)
    native = pytest.importorskip("gpubill_native")
    plain = bytearray(batch(0, [b"a"]))
    plain[-1] ^= 1
    core = native.Core("gpu.usage.v1", TP.topic, 900)
    with pytest.raises(ValueError, match="invalid CRC"):
        core.parse([], [(TP.topic, TP.partition, bytes(plain), 0)], 0)
