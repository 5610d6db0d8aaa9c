"""The tracker's logic without Faust or Kafka: the high-water marks per round key (source
partition, spend partition), a tenant summed over its spend partition's rounds, and events
emitted once whatever re-evaluates them (issues 15, 26)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal

from billing_rules.spend import AlertPolicy, SpendContext
from schemas.spend import SpendRound, encode_round, spend_partition
from streams.spend.tracker import SpendTracker

NOW = datetime(2026, 3, 10, tzinfo=UTC)
RENT = ("A800-80G", "hourly", Decimal("10"), 3600, Decimal("0"))


ACME = spend_partition("acme", 4)  # crc32(b"acme") = 96,778,814 = 4 × 24,194,703 + 2
# crc32(b"omega") = 1,243,192,634 = 4 × 310,798,158 + 2: the same spend partition


def _record(partition: int, marks: tuple[int, int], seconds: int, **others: int) -> tuple[SpendRound, str]:
    tenants = {tenant: {"2026-03": ((RENT + (s,),), ())} for tenant, s in (others | {"acme": seconds}).items()}
    record = SpendRound(partition, ACME, marks, tenants)
    return record, encode_round(record).decode()


class _Table(dict):
    """The tracker's table: round key → value."""

    def fold(self, tracker: SpendTracker, record: SpendRound, raw: str) -> dict | None:
        value = tracker.merge(self.get(record.key), record, raw)
        if value is not None:
            self[record.key] = value
        return value


class _Log:
    """The events topic: what is on it, and what a produce put there."""

    def __init__(self, on_topic=()):
        self.on_topic = set(on_topic)
        self.reads = 0

    async def seen_all(self, ids):
        self.reads += 1
        return set().union(*ids.values()) & self.on_topic

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


def test_merge_keeps_each_round_keys_latest_record_by_marks():
    assert ACME == 2
    tracker = _tracker(_Log(), [])
    table = _Table()
    for partition, marks, seconds in ((0, (10, 10), 100), (1, (5, 5), 50), (0, (20, 15), 300)):
        table.fold(tracker, *_record(partition, marks, seconds, omega=1))
    # partition 0's latest (300 s) + partition 1's (50 s): rounds are cumulative, never added twice
    assert list(tracker.spend_of("acme", table.get)["2026-03"].rent_s.values()) == [350]
    assert list(tracker.spend_of("omega", table.get)["2026-03"].rent_s.values()) == [2]  # 1 from each source
    # the same round again (a replay) is accepted and changes nothing; an older one is refused
    before = dict(table)
    assert table.fold(tracker, *_record(0, (20, 15), 300, omega=1)) == before["0/2"]
    assert table.fold(tracker, *_record(0, (20, 14), 999)) is None
    assert table == before
    # a tracker that recovered the table (a restart: nothing merged in this process) reads the same
    successor = _tracker(_Log(), [])
    assert list(successor.spend_of("acme", table.get)["2026-03"].rent_s.values()) == [350]


def test_events_are_emitted_once_across_re_evaluations():
    produced: list = []
    log = _Log()
    tracker = _tracker(log, produced)
    table = _Table()
    table.fold(tracker, *_record(0, (1, 1), 7200))  # ¥20.00 of ¥40.00: 50 %

    async def run():
        first = await tracker.evaluate("acme", table.get, NOW)
        again = await asyncio.gather(*(tracker.evaluate("acme", table.get, NOW) for _ in range(5)))
        return first, again

    first, again = asyncio.run(run())
    assert [e.threshold for e in first] == ["50"]
    assert again == [[]] * 5
    assert [e.threshold for e in produced] == ["50"]
    assert log.reads == 1  # the topic is read once, for the new id only


def test_an_event_already_on_the_topic_is_not_produced_again():
    produced: list = []
    tracker = _tracker(_Log(), produced)
    table = _Table()
    table.fold(tracker, *_record(0, (1, 1), 14400))  # ¥40.00: 50, 80 and 100 %
    first = asyncio.run(tracker.evaluate("acme", table.get, NOW))
    assert [e.threshold for e in first] == ["50", "80", "100"]
    # a new tracker (a restart, or the tenant's new owner) finds them on the topic
    again: list = []
    successor = _tracker(_Log({e.event_id for e in produced}), again)
    assert asyncio.run(successor.evaluate("acme", table.get, NOW)) == []
    assert again == []


def test_no_context_no_events():
    produced: list = []
    tracker = _tracker(_Log(), produced)
    tracker.contexts.clear()
    table = _Table()
    table.fold(tracker, *_record(0, (1, 1), 14400))
    assert asyncio.run(tracker.evaluate("acme", table.get, NOW)) == []
    assert produced == []


def test_changed_tenants_are_emitted_together_one_look_at_the_topic_per_partition():
    # acme and omega share spend partition 2 (above): both cross 50 % of ¥40.00 in one round
    produced: list = []
    log = _Log()
    tracker = _tracker(log, produced)
    tracker.contexts["omega"] = SpendContext("omega", "2026-03", Decimal("0"), budget=Decimal("40.00"))
    table = _Table()
    spend_round, raw = _record(0, (1, 1), 7200, omega=7200)  # ¥20.00 each
    table.fold(tracker, spend_round, raw)
    tracker.changed(spend_round)
    emitted = asyncio.run(tracker.evaluate_dirty(table.get))
    assert sorted((e.tenant, e.threshold) for e in emitted) == [("acme", "50"), ("omega", "50")]
    assert log.reads == 1 and len(produced) == 2  # one look at the topic, for both
    assert tracker.dirty == set() and asyncio.run(tracker.evaluate_dirty(table.get)) == []


# -- rounds waiting together: only the newest of a key is folded (streams/spend/app.py) ----------

class _Message:
    def __init__(self, offset: int) -> None:
        self.partition, self.offset, self.timestamp = ACME, offset, None


class _Event:
    def __init__(self, offset: int, raw: bytes) -> None:
        self.message, self.key, self.value = _Message(offset), b"0/2", raw


def _waiting(*rounds: tuple[tuple[int, int], int]) -> list[_Event]:
    """Events of one key in offset order: each round's marks and oldest reading (ms)."""
    return [_Event(n, encode_round(SpendRound(0, ACME, marks, {"acme": {}}, oldest_ms=oldest)))
            for n, (marks, oldest) in enumerate(rounds)]


def test_the_header_of_a_round_is_read_off_its_start_and_nothing_else_is_taken_for_it():
    from schemas.spend import round_header

    raw = encode_round(SpendRound(3, 1, (120, 7), {"acme": {}}, oldest_ms=5, produced_ms=6))
    assert round_header(raw) == ((120, 7), 5, 6)
    # not as the workers write rounds: no header, so the rounds of its key are folded one by one
    assert round_header(b" " + raw) is None
    assert round_header(raw.replace(b'"marks":{"power":7,"usage":120}', b'"marks":{"usage":120,"power":7}')) is None
    assert round_header(b'{"tenants":{"x":{}},"marks":{"power":9,"usage":9},"oldest_ms":1,"partition":0,'
                        b'"produced_ms":1,') is None  # marks further in are not the round's


def test_of_rounds_waiting_together_the_newest_by_marks_is_folded_with_the_oldest_reading_behind_them():
    from streams.spend.app import _newest

    events = _waiting(((10, 10), 1_000), ((20, 25), 900), ((30, 30), 1_100))
    event, oldest = _newest(events)
    assert event is events[2] and oldest == 900
    # a zombie's round after the live worker's (lower marks, later offset) does not win
    events = _waiting(((30, 30), 1_100), ((12, 12), 800))
    assert _newest(events)[0] is events[0]
    # marks that no round dominates, or a round not as the workers write them: one by one
    assert _newest(_waiting(((30, 10), 1), ((10, 30), 1))) is None
    odd = _waiting(((1, 1), 1))
    odd[0].value = b" " + odd[0].value
    assert _newest(_waiting(((2, 2), 1)) + odd) is None
