"""The feeder's promises, with a stand-in consumer (the real one runs in tests/e2e):

- offsets are committed only behind batches the agent marked done, and in fetch order;
- before partitions are given up, every batch in flight is written and committed, then the
  rater is told to forget; a batch fetched before the rebalance and not yet handed over
  is dropped (its records come again from the committed offset);
- what is fetched of newly assigned partitions waits until `on_assigned` has loaded their
  state (aiokafka fetches them while it calls the listener).
"""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.kafka.feeder import IN_FLIGHT, Batch, Feeder
from streams.kafka.message import Message

U0, P0 = TopicPartition(TOPIC_USAGE, 0), TopicPartition(TOPIC_POWER, 0)


class FakeConsumer:
    """Hands out prepared fetches one per getmany; records commits."""

    def __init__(self, fetches: list[dict]) -> None:
        self.fetches, self.commits, self.listener = list(fetches), [], None
        self.assigned = {U0, P0}

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def subscribe(self, topics, listener) -> None:
        self.listener = listener

    def assignment(self) -> set:
        return set(self.assigned)

    async def getmany(self, timeout_ms: int, max_records: int) -> dict:
        await asyncio.sleep(0.01)
        return self.fetches.pop(0) if self.fetches else {}

    async def commit(self, offsets: dict) -> None:
        self.commits.append({(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()})


def fetch(tp: TopicPartition, first: int, count: int) -> dict:
    return {tp: [Message(tp.topic, tp.partition, offset, b"G", b"{}") for offset in range(first, first + count)]}


async def until(condition, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def test_offsets_are_committed_behind_done_batches_in_order() -> None:
    async def scenario():
        consumer = FakeConsumer([fetch(U0, 0, 3), fetch(P0, 0, 2)])
        handed: list[Batch] = []

        async def route(batch: Batch) -> None:
            handed.append(batch)

        feeder = Feeder("unused:9092", "g", {TOPIC_USAGE: route, TOPIC_POWER: route}, consumer=consumer)
        task = asyncio.ensure_future(feeder.run())
        await until(lambda: len(handed) == 2)
        handed[1].finish()  # the second batch is written first…
        await asyncio.sleep(0.2)
        assert consumer.commits == []  # …but nothing is committed past the unwritten first one
        handed[0].finish()
        # both in one commit or in two, one after the other (a loaded machine may turn the
        # committer's loop between them): what counts is the order and the offsets
        await until(lambda: len({key for commit in consumer.commits for key in commit}) == 2)
        task.cancel()
        return consumer.commits

    commits = asyncio.run(scenario())
    merged = {k: v for commit in commits for k, v in commit.items()}
    assert merged == {(TOPIC_USAGE, 0): 3, (TOPIC_POWER, 0): 2}  # offsets 0–2 and 0–1 → next 3 and 2
    assert (TOPIC_USAGE, 0) in commits[0]  # the first batch's offsets never after the second's


def test_a_rebalance_writes_and_commits_what_is_in_flight_then_forgets() -> None:
    assert IN_FLIGHT == 3  # the scenario below fills every slot
    async def scenario():
        # Three batches fetched and handed over (IN_FLIGHT); the fourth is fetched only once a slot is free.
        consumer = FakeConsumer([fetch(U0, 0, 4), fetch(P0, 0, 4), fetch(U0, 4, 2), fetch(U0, 6, 2)])
        handed: list[Batch] = []
        forgotten: list[bool] = []

        async def route(batch: Batch) -> None:
            handed.append(batch)

        feeder = Feeder("unused:9092", "g", {TOPIC_USAGE: route, TOPIC_POWER: route}, consumer=consumer,
                        on_revoked=lambda: forgotten.append(True))
        task = asyncio.ensure_future(feeder.run())
        await until(lambda: len(handed) == 3)
        await asyncio.sleep(0.05)
        assert len(consumer.fetches) == 1  # not fetched while every slot is taken
        revoke = asyncio.ensure_future(consumer.listener.on_partitions_revoked([U0, P0]))
        await asyncio.sleep(0.1)
        assert not revoke.done() and not forgotten  # waits for the batches in flight
        for batch in list(handed):
            batch.finish()
        await until(revoke.done)
        assert forgotten == [True]
        commits_at_revoke = list(consumer.commits)
        await asyncio.sleep(0.1)
        assert len(handed) == 3  # the next fetch waits for the partitions' assignment…
        await consumer.listener.on_partitions_assigned([U0, P0])
        await until(lambda: len(handed) == 4)  # …and goes on after it
        task.cancel()
        return commits_at_revoke, handed

    commits, handed = asyncio.run(scenario())
    merged = {k: v for commit in commits for k, v in commit.items()}
    assert merged == {(TOPIC_USAGE, 0): 6, (TOPIC_POWER, 0): 4}  # the fourth batch is not in it
    assert [m.offset for m in handed[3].messages] == [6, 7]


def test_nothing_fetched_is_handed_over_while_the_assignment_is_being_taken_over() -> None:
    # aiokafka sets the new assignment and starts fetching it before it calls the listener: a
    # fetch that returns while `on_assigned` loads the partitions' state (the spend tracker's
    # table, the ledger's spend) must wait for it, or it is folded onto state about to be replaced.
    async def scenario():
        consumer = FakeConsumer([{}, fetch(U0, 0, 2)])
        handed: list[Batch] = []
        loading = asyncio.Event()
        events: list[str] = []

        async def route(batch: Batch) -> None:
            events.append("handed")
            handed.append(batch)

        async def on_assigned(assigned: set) -> None:
            loading.set()
            await asyncio.sleep(0.3)  # reading a changelog
            events.append("loaded")

        feeder = Feeder("unused:9092", "g", {TOPIC_USAGE: route}, consumer=consumer, on_assigned=on_assigned)
        task = asyncio.ensure_future(feeder.run())
        await until(lambda: consumer.listener is not None)
        await consumer.listener.on_partitions_revoked(set())
        assigning = asyncio.ensure_future(consumer.listener.on_partitions_assigned([U0]))
        await loading.wait()
        await until(lambda: not consumer.fetches)  # the fetch came back while loading
        await until(lambda: handed)
        await assigning
        task.cancel()
        return events

    assert asyncio.run(scenario()) == ["loaded", "handed"]


def test_a_failed_take_over_stops_the_feeder_instead_of_handing_records_on() -> None:
    # aiokafka logs what a rebalance listener raises and carries on consuming: a feeder whose
    # `on_assigned` failed would hand on records of partitions whose state was never loaded.
    async def scenario():
        consumer = FakeConsumer([{}, fetch(U0, 0, 2)])
        handed: list[Batch] = []

        async def route(batch: Batch) -> None:
            handed.append(batch)

        async def on_assigned(assigned: set) -> None:
            raise OSError("the changelog could not be read")

        feeder = Feeder("unused:9092", "g", {TOPIC_USAGE: route}, consumer=consumer, on_assigned=on_assigned)
        task = asyncio.ensure_future(feeder.run())
        await until(lambda: consumer.listener is not None)
        await consumer.listener.on_partitions_revoked(set())
        try:
            await consumer.listener.on_partitions_assigned([U0])
        except OSError:
            pass  # aiokafka would log it
        await until(task.done)
        return handed, task.exception()

    handed, raised = asyncio.run(scenario())
    assert handed == [] and isinstance(raised, RuntimeError) and isinstance(raised.__cause__, OSError)


def test_what_the_liveness_check_reads_and_the_test_only_stall_hook() -> None:
    # streams/liveness.py reads `rebalancing` and `in_flight`; GPUBILL_FAULT_STALL_AFTER=1 makes the
    # feeder hand on one fetch round and then hang with the next one fetched (the reported bugs)
    async def scenario():
        consumer = FakeConsumer([fetch(U0, 0, 3), fetch(U0, 3, 2), fetch(U0, 5, 1)])
        handed: list[Batch] = []

        async def route(batch: Batch) -> None:
            handed.append(batch)

        feeder = Feeder("unused:9092", "g", {TOPIC_USAGE: route}, consumer=consumer, fault_stall_after=1)
        task = asyncio.ensure_future(feeder.run())
        await until(lambda: consumer.listener is not None and handed)
        seen = [(feeder.rebalancing, feeder.in_flight)]  # one batch handed on, not done
        handed[0].finish()
        await until(lambda: consumer.commits)
        seen.append((feeder.rebalancing, feeder.in_flight))
        await consumer.listener.on_partitions_revoked(set())  # partitions change hands
        seen.append((feeder.rebalancing, feeder.in_flight))
        await consumer.listener.on_partitions_assigned([U0])
        seen.append((feeder.rebalancing, feeder.in_flight))
        await asyncio.sleep(0.3)
        task.cancel()
        return seen, len(handed), consumer.fetches, consumer.commits

    seen, handed, left, commits = asyncio.run(scenario())
    assert seen == [(False, 1), (False, 0), (True, 0), (False, 0)]
    assert handed == 1  # the second round was fetched and never handed on
    assert len(left) == 1  # nor was a third fetched: the feeder hangs
    assert {k: v for commit in commits for k, v in commit.items()} == {(TOPIC_USAGE, 0): 3}
