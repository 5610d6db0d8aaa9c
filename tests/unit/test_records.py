"""Record sets (streams/kafka/record_sets.py): what the worker's consumer hands on instead of records.

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


def test_the_installed_aiokafka_fits_the_adapter() -> None:
    # If an aiokafka upgrade breaks what record_sets.py subclasses, this fails (the worker
    # would still run, record by record, and say so in a log line and a metric).
    from streams.kafka.record_sets import FastPath, self_check

    assert self_check() == FastPath(True)


def test_an_aiokafka_that_no_longer_fits_is_named_and_left_unpatched(monkeypatch) -> None:
    from aiokafka.consumer import fetcher

    from streams.kafka import record_sets

    monkeypatch.delattr(fetcher, "READ_UNCOMMITTED")
    status = record_sets.self_check()
    assert not status.active and status.reason == "aiokafka.consumer.fetcher has no READ_UNCOMMITTED"
    monkeypatch.setattr(record_sets, "_status", None)
    untouched = object()
    monkeypatch.setattr(fetcher, "PartitionRecords", untouched)
    assert not record_sets.install().active
    assert fetcher.PartitionRecords is untouched  # nothing was patched


def test_only_the_adapter_touches_aiokafkas_private_modules() -> None:
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    private = re.compile(r"^\s*(from|import)\s+aiokafka\.(consumer\.fetcher|record\b)|from aiokafka\.consumer import fetcher",
                         re.MULTILINE)
    users = sorted(str(path.relative_to(root)) for package in ("schemas", "billing_rules", "warehouse", "streams",
                                                                "reports", "gpubill")
                   for path in (root / package).rglob("*.py") if private.search(path.read_text(encoding="utf-8")))
    assert users == ["streams/kafka/record_sets.py"]
