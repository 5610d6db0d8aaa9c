"""The tracker's logic without Faust or Kafka: the high-water marks per source partition, and
events emitted once whatever re-evaluates them (issue 15)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal

from billing_rules.spend import AlertPolicy, SpendContext
from schemas.spend import SpendRecord, encode_record
from streams.spend.tracker import SpendTracker

NOW = datetime(2026, 3, 10, tzinfo=UTC)
RENT = ("A800-80G", "hourly", Decimal("10"), 3600, Decimal("0"))


def _record(partition: int, marks: tuple[int, int], seconds: int) -> tuple[SpendRecord, str]:
    record = SpendRecord("acme", partition, marks, {"2026-03": ((RENT + (seconds,),), ())})
    return record, encode_record(record).decode()


class _Log:
    """The events topic: what is on it, and what a produce put there."""

    def __init__(self, on_topic=()):
        self.on_topic = set(on_topic)
        self.reads = 0

    async def seen(self, ids, partition):
        self.reads += 1
        return set(ids) & self.on_topic

    def emitted(self, event_id):
        pass


def _tracker(log: _Log, produced: list) -> SpendTracker:
    async def produce(event, partition):
        produced.append(event)
        log.on_topic.add(event.event_id)

    tracker = SpendTracker(partitions=4, policy=AlertPolicy(), period_of=lambda s: "2026-03", events=log,
                           produce=produce)
    tracker.contexts["acme"] = SpendContext("acme", "2026-03", Decimal("0"), budget=Decimal("40.00"))
    return tracker


def test_merge_keeps_each_source_partitions_latest_record_by_marks():
    tracker = _tracker(_Log(), [])
    value = None
    for partition, marks, seconds in ((0, (10, 10), 100), (1, (5, 5), 50), (0, (20, 15), 300)):
        record, raw = _record(partition, marks, seconds)
        value = tracker.merge(value, record, raw)
    # partition 0's latest (300 s) + partition 1's (50 s): records are cumulative, never added twice
    assert list(tracker.spend_of("acme", value)["2026-03"].rent_s.values()) == [350]
    # the same record again (a replay) is accepted and changes nothing; an older one is refused
    record, raw = _record(0, (20, 15), 300)
    assert tracker.merge(value, record, raw) == value
    record, raw = _record(0, (20, 14), 999)
    assert tracker.merge(value, record, raw) is None


def test_events_are_emitted_once_across_re_evaluations():
    produced: list = []
    log = _Log()
    tracker = _tracker(log, produced)
    record, raw = _record(0, (1, 1), 7200)  # ¥20.00 of ¥40.00: 50 %
    value = tracker.merge(None, record, raw)

    async def run():
        first = await tracker.evaluate("acme", value, NOW)
        again = await asyncio.gather(*(tracker.evaluate("acme", value, NOW) for _ in range(5)))
        return first, again

    first, again = asyncio.run(run())
    assert [e.threshold for e in first] == ["50"]
    assert again == [[]] * 5
    assert [e.threshold for e in produced] == ["50"]
    assert log.reads == 1  # the topic is read once, for the new id only


def test_an_event_already_on_the_topic_is_not_produced_again():
    produced: list = []
    tracker = _tracker(_Log(), produced)
    record, raw = _record(0, (1, 1), 14400)  # ¥40.00: 50, 80 and 100 %
    first = asyncio.run(tracker.evaluate("acme", tracker.merge(None, record, raw), NOW))
    assert [e.threshold for e in first] == ["50", "80", "100"]
    # a new tracker (a restart, or the tenant's new owner) finds them on the topic
    again: list = []
    successor = _tracker(_Log({e.event_id for e in produced}), again)
    assert asyncio.run(successor.evaluate("acme", tracker.merge(None, record, raw), NOW)) == []
    assert again == []


def test_no_context_no_events():
    produced: list = []
    tracker = _tracker(_Log(), produced)
    tracker.contexts.clear()
    record, raw = _record(0, (1, 1), 14400)
    assert asyncio.run(tracker.evaluate("acme", tracker.merge(None, record, raw), NOW)) == []
    assert produced == []
