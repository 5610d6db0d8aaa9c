"""Reading a topic to its end, outside any consumer group: the spend rounds a worker takes
over at an assignment, and the billing events already emitted for a tenant.

    latest_spend_records(...)  every valid round of a spend topic, the latest per key
    EmittedEvents              the event ids on gpu.billing-events.v1, per partition,
                               read incrementally: asked before a new event is produced

Both read "to the end as of when asked": the end offsets are fetched first, then the
partitions are read up to them. Whatever was acknowledged before the question is seen.
Invalid records are logged and skipped, never trusted and never fatal.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.billing_events import InvalidBillingEvent, parse_event
from schemas.spend import InvalidSpendRecord, SpendRound, parse_round
from streams.errors import StreamsError
from streams.kafka.settings import committed_only

log = logging.getLogger("gpubill.spend")

FETCH_TIMEOUT_MS = 500
READ_TIMEOUT_S = 120


async def _read(consumer: AIOKafkaConsumer, starts: dict[TopicPartition, int],
                take: Callable[[Any], None]) -> dict[TopicPartition, int]:
    """Read each partition from its start to the end offset it has now; returns the new positions."""
    partitions = list(starts)
    ends = await consumer.end_offsets(partitions)
    todo = {tp for tp in partitions if ends[tp] > starts[tp]}
    for tp in todo:
        consumer.seek(tp, starts[tp])
    positions = dict(starts)
    deadline = time.monotonic() + READ_TIMEOUT_S
    while todo:
        if time.monotonic() > deadline:
            raise StreamsError(f"could not read {sorted(str(tp) for tp in todo)} to its end within {READ_TIMEOUT_S} s")
        fetched = await consumer.getmany(*todo, timeout_ms=FETCH_TIMEOUT_MS, max_records=10_000)
        for tp, messages in fetched.items():
            for message in messages:
                if message.offset < ends[tp]:
                    take(message)
                positions[tp] = message.offset + 1
        for tp in list(todo):
            if positions[tp] >= ends[tp] or await consumer.position(tp) >= ends[tp]:
                positions[tp] = max(positions[tp], ends[tp])
                todo.discard(tp)
    return positions


def _partitions(topic: str, count: int) -> list[TopicPartition]:
    """Partitions 0 … count − 1 of `topic`: the spend and events topics have the readings
    topics' count, checked when they are ensured (streams/kafka/admin.py)."""
    return [TopicPartition(topic, p) for p in range(count)]


def _consumer(bootstrap: str, security: dict[str, Any]) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                            auto_offset_reset="earliest", **committed_only(security))


async def latest_values(bootstrap: str, topic: str, security: dict[str, Any], partitions: int,
                        only: Iterable[int] | None = None) -> dict[bytes, bytes | None]:
    """The latest value per key of `topic` (None: deleted), read to its end — of every
    partition, or `only` those: a compacted topic's state, e.g. the changelog of the tracker's
    table."""
    latest: dict[bytes, bytes | None] = {}
    await _read_whole(bootstrap, security, topic, partitions, lambda message: latest.__setitem__(message.key, message.value),
                      only)
    return latest


async def _read_whole(bootstrap: str, security: dict[str, Any], topic: str, partitions: int,
                      take: Callable[[Any], None], only: Iterable[int] | None = None) -> None:
    """Hand every record of `topic` (of its partitions `only`, when given), from the start to
    its end as of now, to `take`."""
    assigned = _partitions(topic, partitions)
    if only is not None:
        wanted = set(only)
        assigned = [tp for tp in assigned if tp.partition in wanted]
        if not assigned:
            return
    consumer = _consumer(bootstrap, security)
    await consumer.start()
    try:
        consumer.assign(assigned)
        await _read(consumer, {tp: 0 for tp in assigned}, take)
    finally:
        await consumer.stop()


async def latest_spend_records(bootstrap: str, topic: str, security: dict[str, Any], partitions: int
                               ) -> list[SpendRound]:
    """The latest valid round per key on the spend topic, read to its end."""
    latest: dict[bytes, SpendRound] = {}
    bad = 0

    def take(message: Any) -> None:
        nonlocal bad
        try:
            spend_round = parse_round(message.value or b"")
        except InvalidSpendRecord as exc:
            bad += 1
            if bad <= 3:
                log.warning("skipping an invalid spend record at %s:%s@%s: %s",
                            message.topic, message.partition, message.offset, exc)
            return
        if message.key != spend_round.key.encode() or message.partition != spend_round.spend_partition:
            bad += 1
            log.warning("skipping a spend record whose key is not <partition>/<spend partition>, or that is not "
                        "on its spend partition, at %s:%s@%s", message.topic, message.partition, message.offset)
            return
        latest[message.key] = spend_round

    await _read_whole(bootstrap, security, topic, partitions, take)
    if bad:
        log.warning("%d invalid spend records skipped", bad)
    return list(latest.values())


async def end_offsets(bootstrap: str, topic: str, security: dict[str, Any], partitions: int) -> dict[int, int]:
    """Partition → end offset (the next to be written) of `topic`."""
    consumer = _consumer(bootstrap, security)
    await consumer.start()
    try:
        ends = await consumer.end_offsets(_partitions(topic, partitions))
    finally:
        await consumer.stop()
    return {tp.partition: end for tp, end in ends.items()}


async def committed_offsets(bootstrap: str, security: dict[str, Any], group: str, topic: str,
                            partitions: int) -> dict[int, int]:
    """Partition → the offset `group` committed on `topic` (0 where none), without joining it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=group,
                                **committed_only(security))
    await consumer.start()
    try:
        return {tp.partition: await consumer.committed(tp) or 0 for tp in _partitions(topic, partitions)}
    finally:
        await consumer.stop()


class EmittedEvents:
    """Which billing event ids are already on the events topic, per partition.

    `seen_all({partition: ids})` answers from memory when it can and reads the partitions' new
    records otherwise: an event that another worker produced before this one took its
    tenant over is found, because it was acknowledged before the partition changed hands.
    """

    def __init__(self, bootstrap: str, topic: str, security: dict[str, Any], partitions: int) -> None:
        self.topic, self.partitions = topic, partitions
        self._bootstrap, self._security = bootstrap, security
        self._consumer: AIOKafkaConsumer | None = None  # made on the worker's loop, at the first question
        self._ids: set[str] = set()
        self._positions: dict[int, int] = {}

    async def seen_all(self, ids: dict[int, set[str]]) -> set[str]:
        """The ids of `ids` (partition → ids) already on the topic: the partitions that must be
        read are read together, in one pass (`seen` one after the other waited a fetch each)."""
        wanted = set().union(*ids.values()) if ids else set()
        unknown = sorted(partition for partition, some in ids.items() if not some <= self._ids)
        if unknown:
            await self._catch_up(*unknown)
        return wanted & self._ids

    def emitted(self, event_id: str) -> None:
        """Remember an event this process produced (acknowledged)."""
        self._ids.add(event_id)

    async def _catch_up(self, *partitions: int) -> None:
        if self._consumer is None:
            self._consumer = _consumer(self._bootstrap, self._security)
            await self._consumer.start()
            self._consumer.assign(_partitions(self.topic, self.partitions))
        tps = {partition: TopicPartition(self.topic, partition) for partition in partitions}

        def take(message: Any) -> None:
            try:
                self._ids.add(parse_event(message.value or b"").event_id)
            except InvalidBillingEvent as exc:
                log.warning("an invalid billing event at %s:%s@%s: %s", message.topic, message.partition,
                            message.offset, exc)

        positions = await _read(self._consumer, {tp: self._positions.get(p, 0) for p, tp in tps.items()}, take)
        for partition, tp in tps.items():
            self._positions[partition] = positions[tp]

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
