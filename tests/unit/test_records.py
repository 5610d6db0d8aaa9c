"""Record sets (streams/kafka/record_sets.py): what the worker's consumer hands on instead of records.

Batches are built with aiokafka's own (pure-Python) builder (`streams.kafka.record_sets.record_batch`);
`_PartitionRecords` is driven as aiokafka's fetcher drives it.
"""

from __future__ import annotations

import pytest
from aiokafka.consumer.fetcher import READ_COMMITTED, READ_UNCOMMITTED
from aiokafka.errors import CorruptRecordException
from aiokafka.structs import TopicPartition

from streams.kafka.record_sets import (RECORD_SETS, RecordSet, _KeptMemoryRecords, _PartitionRecords, marker_batch,
                                       messages_of, record_batch)

TP = TopicPartition("gpu.power.v1", 3)


def batch(base: int, values: list[bytes], gzip: bool = False) -> bytes:
    return record_batch(base, [(base + delta, b"k", value, 1_000 + delta, [("h", b"v")])
                               for delta, value in enumerate(values)], gzip=gzip)


def unpack(data: bytes, fetch_offset: int, deserializer=RECORD_SETS, isolation=READ_UNCOMMITTED,
           aborted: list[tuple[int, int]] | None = None) -> list:
    """As aiokafka's fetcher does: `aborted` is the fetch response's (producer id, first offset) list."""
    records = _PartitionRecords(TP, _KeptMemoryRecords(data), aborted or [], fetch_offset, None, deserializer, True,
                                isolation)
    return list(records), records.next_fetch_offset


def transactional(base: int, producer_id: int, values: list[bytes], gzip: bool = False) -> bytes:
    return record_batch(base, [(base + delta, b"k", value, 1_000 + delta, []) for delta, value in enumerate(values)],
                        producer_id=producer_id, transactional=True, gzip=gzip)


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


# A partition as the broker writes it when two producers interleave transactions: producer 7
# commits (offsets 0–1, marker 4), producer 8 aborts (2–3 and 5, marker 6), then a plain
# batch (7) and producer 7 again, aborted (8, marker 9). The fetch response lists the aborted
# transactions by (producer id, first offset): (8, 2) and (7, 8).
INTERLEAVED = (transactional(0, 7, [b"c0", b"c1"]) + transactional(2, 8, [b"a2", b"a3"]) + marker_batch(4, 7, commit=True)
               + transactional(5, 8, [b"a5"]) + marker_batch(6, 8, commit=False) + batch(7, [b"p7"])
               + transactional(8, 7, [b"a8"]) + marker_batch(9, 7, commit=False))
ABORTED = [(8, 2), (7, 8)]
COMMITTED = [(0, b"c0"), (1, b"c1"), (7, b"p7")]  # by hand: everything but the aborted 2, 3, 5, 8 and the markers


def test_read_committed_a_set_leaves_out_the_aborted_transactions_as_aiokafka_does() -> None:
    (got,), position = unpack(INTERLEAVED, fetch_offset=0, isolation=READ_COMMITTED, aborted=ABORTED)
    assert [(m.offset, m.value) for m in messages_of(got)] == COMMITTED
    assert (got.start, got.next_offset, position, got.plain) == (0, 10, 10, True)
    ordinary, position = unpack(INTERLEAVED, fetch_offset=0, deserializer=None, isolation=READ_COMMITTED,
                                aborted=ABORTED)
    assert [(r.offset, r.value) for r in ordinary] == COMMITTED and position == 10  # aiokafka's own path agrees
    native = pytest.importorskip("gpubill_native")  # and the core reads the set the same
    core = native.Core("gpu.usage.v1", TP.topic, 900)
    others, readings_in, positions, judge, _ = core.parse([], [(TP.topic, TP.partition, got.data, got.start)], 0,
                                                          False)
    assert sorted((offset, value) for _, _, _, offset, _, value, *_ in judge) == COMMITTED


def test_read_committed_with_no_aborted_transaction_the_fetch_goes_on_whole() -> None:
    # The normal case: the broker lists no aborted transaction among the fetched offsets, and the
    # set is the fetched bytes as they came (markers included: every reader skips them).
    data = transactional(0, 7, [b"c0", b"c1"]) + marker_batch(2, 7, commit=True) + batch(3, [b"p3"])
    (got,), position = unpack(data, fetch_offset=1, isolation=READ_COMMITTED)
    assert got == RecordSet(TP.topic, TP.partition, data, start=1, next_offset=4, plain=True) and position == 4
    assert [(m.offset, m.value) for m in messages_of(got)] == [(1, b"c1"), (3, b"p3")]


def test_a_fetch_of_only_aborted_records_and_markers_still_moves_the_position_on() -> None:
    # Nothing to rate, but the set carries the position past them: committed, and a drain whose
    # end offset lies past an aborted transaction reaches it.
    data = transactional(5, 8, [b"a5", b"a6"]) + marker_batch(7, 8, commit=False)
    (got,), position = unpack(data, fetch_offset=5, isolation=READ_COMMITTED, aborted=[(8, 5)])
    assert got == RecordSet(TP.topic, TP.partition, b"", start=5, next_offset=8, plain=True) and position == 8
    (markers,), _ = unpack(marker_batch(9, 7, commit=True), fetch_offset=9)
    assert messages_of(markers) == [] and markers.next_offset == 10


def test_read_committed_a_compressed_aborted_batch_is_left_out_and_the_rest_decoded_by_python() -> None:
    data = transactional(0, 8, [b"a0"], gzip=True) + marker_batch(1, 8, commit=False) + batch(2, [b"p2"], gzip=True)
    (got,), position = unpack(data, fetch_offset=0, isolation=READ_COMMITTED, aborted=[(8, 0)])
    assert not got.plain and [(m.offset, m.value) for m in messages_of(got)] == [(2, b"p2")] and position == 3


def test_read_committed_a_corrupt_batch_is_refused_while_the_aborted_ones_are_sought() -> None:
    data = bytearray(transactional(0, 8, [b"a0"]) + marker_batch(1, 8, commit=False))
    data[30] ^= 1
    with pytest.raises(CorruptRecordException):
        unpack(bytes(data), fetch_offset=0, isolation=READ_COMMITTED, aborted=[(8, 0)])


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


def test_every_consumer_gpubill_builds_reads_committed_records_only() -> None:
    # A new consumer cannot forget it: every AIOKafkaConsumer / KafkaConsumer built in the
    # product's packages takes `**consumer_options(...)` or `**committed_only(...)`
    # (streams/kafka/settings.py), or an aborted transaction's records are billed.
    import ast
    from pathlib import Path

    from streams.kafka.settings import READ_COMMITTED, consumer_options

    root = Path(__file__).resolve().parents[2]
    built, forgetful = 0, []
    for package in ("schemas", "billing_rules", "warehouse", "streams", "reports", "gpubill", "usage", "billing",
                    "tenant_api"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                if name not in ("AIOKafkaConsumer", "KafkaConsumer"):
                    continue
                built += 1
                if not any(k.arg is None and isinstance(k.value, ast.Call)
                           and getattr(k.value.func, "id", "") in ("consumer_options", "committed_only")
                           for k in node.keywords):
                    forgetful.append(f"{path.relative_to(root)}:{node.lineno}")
    assert built >= 9 and forgetful == []
    assert READ_COMMITTED == {"isolation_level": "read_committed"}
    assert consumer_options(object(), client="aiokafka") == {"security_protocol": "PLAINTEXT",
                                                            "isolation_level": "read_committed"}
