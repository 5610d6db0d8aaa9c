"""Kafka → the Faust agents, a batch at a time, and offsets committed only behind the writes.

Why not let Faust consume the topics itself: Faust hands an agent one event per Kafka
message, and that machinery alone costs ≈ 165 µs of CPU per message (three event-loop
turns and two task creations), which capped a worker at ≈ 6,000 readings/s. The feeder
reads the same topics with aiokafka's `getmany` — each partition's fetch as one
`RecordSet` (streams/kafka/record_sets.py), not an object per message — and hands each agent one
event per fetch (tens of thousands of records) through an in-memory Faust channel.

Guarantee, step by step (docs/guarantees.md):

1. `getmany` returns record sets in partition order; the feeder sends them on as one
   `Batch` and remembers it in a FIFO.
2. The agent validates, rates and writes the batch to ClickHouse (idempotent rows, see
   streams/sink.py), produces its dead letters, then marks the batch done.
3. The committer takes batches from the FIFO in order, waits until each is done, and only
   then commits its next offsets. A crash anywhere before that re-delivers the batch
   (at-least-once); rewriting it changes nothing (idempotent) — effectively once.
4. On a rebalance, before partitions are given up, the feeder waits for every batch in
   flight and commits it, then tells the rater to forget its in-memory state (another
   worker may rate those cards meanwhile; what this worker needs again it reads back from
   ClickHouse). Batches fetched before the rebalance and not yet sent are dropped: their
   records are fetched again from the committed offsets. Once partitions are assigned,
   nothing fetched is sent on until `on_assigned` has loaded what they need (aiokafka
   starts fetching them before it calls the listener).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Iterable

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata

from streams.kafka import record_sets as records
from streams.kafka.positions import Positions
from streams.kafka.record_sets import RecordSet
from streams.kafka.settings import committed_only

log = logging.getLogger("gpubill.feeder")

# Per batch: a whole fetch round (a record set per partition, ≤ 1 MiB ≈ 4,000 readings each),
# so that a batch holds usage and power of roughly the same seconds and ClickHouse gets few
# large inserts: fewer parts to merge. (getmany counts a record set as one record.)
FETCH_MAX_RECORDS = 50_000
IN_FLIGHT = 3  # batches sent and not yet written: one being written, one being rated, one waiting
COMMIT_EVERY_S = 0.5  # at most two commits a second; always one at a rebalance and at the end


@dataclass
class Batch:
    """Messages of one fetch for one agent; `done` resolves once they are written."""

    messages: list  # `Message`s (aiokafka's ConsumerRecords) or `RecordSet`s
    done: asyncio.Future
    # (topic, partition) → the offset after the last message: what may be committed once done.
    positions: dict[tuple[str, int], int] = field(init=False)
    # The offsets the batch spans, kept after `take`: what names its inserts (streams/sink.py).
    source: Positions = field(init=False)

    def __post_init__(self) -> None:
        self.positions = {}
        for m in self.messages:
            self.positions[(m.topic, m.partition)] = m.next_offset if isinstance(m, RecordSet) else m.offset + 1
        self.source = Positions.of(self.messages)

    def take(self) -> list:
        """The messages, once: the batch lets go of them (megabytes of fetched records) as
        soon as they are rated, while it waits to be written and committed."""
        messages, self.messages = self.messages, []
        return messages

    def finish(self, result: Any = None) -> None:
        if not self.done.done():
            self.done.set_result(result)


@dataclass
class Feeder:
    """Consumes `topics` in the worker's group and feeds `routes[topic]` (an async send)."""

    bootstrap: str
    group: str
    routes: dict[str, Callable[[Batch], Awaitable[None]]]
    on_committed: Callable[[dict[tuple[str, int], int]], None] = lambda positions: None
    on_revoked: Callable[[], None] = lambda: None
    # Told the (topic, partition)s assigned, before anything of them reaches a route (live spend
    # loads its state here); None: nothing to do.
    on_assigned: Callable[[set[tuple[str, int]]], Awaitable[None]] | None = None
    consumer: AIOKafkaConsumer | None = None  # made by run() unless given (tests give a fake)
    security: dict[str, Any] = field(default_factory=dict)  # streams.kafka.settings.client_options
    # Each partition's fetch as one RecordSet for the native core (the rating worker), or every
    # record as aiokafka's ConsumerRecord (the spend tracker: a few hundred rounds a second).
    record_sets: bool = True
    generation: int = 0
    # TEST ONLY (GPUBILL_FAULT_STALL_AFTER, tests/e2e/test_liveness_e2e.py): after handing on this
    # many fetch rounds the feeder hangs — heartbeating, holding its partitions, consuming nothing —
    # as the reported aiokafka/Faust bugs do, so that the liveness check (streams/liveness.py) can
    # be shown to work. None (every real run): never.
    fault_stall_after: int | None = None
    _rounds: int = 0  # fetch rounds handed on
    _pending: deque = field(default_factory=deque)
    _slots: asyncio.Semaphore | None = None
    _committer: asyncio.Future | None = None
    _closing: bool = False
    _written: dict[TopicPartition, int] = field(default_factory=dict)  # written, not yet committed
    _last_commit: float = 0.0
    # Clear while partitions change hands: aiokafka starts fetching a new assignment before
    # `on_assigned` has run (and while it runs), so what it fetched waits here for it.
    _assigned: asyncio.Event | None = None
    _assign_failed: BaseException | None = None  # what on_assigned raised (aiokafka only logs it)

    async def run(self) -> None:
        """Consume until cancelled (the worker stops). What was written and not yet committed
        is delivered again to whoever consumes next: harmless, the writes are idempotent."""
        self._slots = asyncio.Semaphore(IN_FLIGHT)
        self._assigned = asyncio.Event()
        self._assigned.set()
        records.install()
        self.consumer = self.consumer or AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap.split(","), group_id=self.group, enable_auto_commit=False,
            auto_offset_reset="earliest", max_poll_records=FETCH_MAX_RECORDS,
            # Bounded per-partition fetches: a batch then holds a slice of every partition
            # (usage and power together) rather than one partition's whole backlog.
            fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=1024 * 1024,
            # A worker that died is noticed after 10 s: its partitions move on without a
            # minute of stalled billing.
            session_timeout_ms=10_000, heartbeat_interval_ms=2_000,
            # Range, not aiokafka's default round robin: partition p of both reading topics
            # (same count, same key) goes to the same member, so a card's usage and power
            # meet in one worker whatever the number of workers.
            partition_assignment_strategy=(RangePartitionAssignor,),
            # Each partition's fetch as one RecordSet, read in place by the native core.
            **({"value_deserializer": records.RECORD_SETS} if self.record_sets else {}),
            **committed_only(self.security),  # committed records only (streams/kafka/settings.py)
        )
        await self.consumer.start()
        self.consumer.subscribe(topics=list(self.routes), listener=_Listener(self))
        self._committer = asyncio.ensure_future(self._commit_loop())
        try:
            while True:
                self._check_committer()
                self._check_assignment()
                # Fetch only once a batch can go on: what arrives meanwhile joins it, so a
                # busy worker rates fewer, larger batches (less work per batch: look-ups,
                # inserts) instead of queueing small ones.
                async with self._slots:
                    pass
                fetched = await self.consumer.getmany(timeout_ms=100, max_records=FETCH_MAX_RECORDS)
                if fetched:
                    generation = self.generation
                    await self._assigned.wait()  # the assignment's state is loaded (on_assigned)
                    self._check_assignment()
                    if self.fault_stall_after is not None and self._rounds >= self.fault_stall_after:
                        log.warning("test fault GPUBILL_FAULT_STALL_AFTER=%d: the feeder hangs now",
                                    self.fault_stall_after)
                        await asyncio.Event().wait()  # until cancelled (the worker stops)
                    await self._send(fetched, generation)
                    self._rounds += 1
        finally:
            self._closing = True  # leaving the group revokes: nothing in flight will finish now
            self._committer.cancel()
            await self.consumer.stop()

    @property
    def rebalancing(self) -> bool:
        """True while partitions change hands (revoked, and the new assignment not yet loaded)."""
        return self._assigned is not None and not self._assigned.is_set()

    @property
    def in_flight(self) -> int:
        """Batches handed to the agents and not yet settled (written, and moved to be committed)."""
        return len(self._pending)

    def _check_committer(self) -> None:
        """Raise what stopped the commit loop, if it stopped: without it nothing is committed."""
        if self._committer is not None and self._committer.done() and not self._committer.cancelled():
            self._committer.result()
            raise RuntimeError("the commit loop stopped")

    def _check_assignment(self) -> None:
        """Raise what `on_assigned` raised: aiokafka logs a listener's exception and goes on, and
        a feeder whose partitions' state was not loaded must not hand their records on."""
        if self._assign_failed is not None:
            raise RuntimeError("loading the state of the assigned partitions failed") from self._assign_failed

    async def _send(self, fetched: dict, generation: int) -> None:
        """One batch per agent: the fetched usage and power go to the rater together."""
        by_route: dict[Callable, list] = {}
        for tp, fetched_items in fetched.items():
            by_route.setdefault(self.routes[tp.topic], []).extend(fetched_items)
        for route, messages in by_route.items():
            await self._slots.acquire()
            if generation != self.generation:  # a rebalance happened while we waited: refetch
                self._slots.release()
                return
            batch = Batch(messages, asyncio.get_running_loop().create_future())
            self._pending.append(batch)
            await route(batch)

    async def _commit_loop(self) -> None:
        while True:
            await self._settle()
            if self._written and (time.monotonic() - self._last_commit >= COMMIT_EVERY_S or not self._pending):
                await self.commit()

    async def _settle(self) -> None:
        """Move finished batches, in order, from the FIFO into what may be committed.

        Only the commit loop calls this, so batches leave the FIFO in one place."""
        if not self._pending:
            await asyncio.sleep(0.02)
            return
        batch = self._pending[0]
        await asyncio.wait([batch.done])
        batch.done.result()  # a failed batch raises here: nothing past it is ever committed
        self._pending.popleft()
        self._slots.release()
        for (topic, partition), offset in batch.positions.items():
            self._written[TopicPartition(topic, partition)] = offset

    async def commit(self) -> None:
        """Commit what has been written, for the partitions this worker still holds."""
        if not self._written:
            return
        assigned = self.consumer.assignment()
        offsets = {tp: OffsetAndMetadata(offset, "") for tp, offset in self._written.items() if tp in assigned}
        self._written.clear()
        self._last_commit = time.monotonic()
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            # The group moved on (a rebalance): these records go to their new owner again,
            # and rewriting them is harmless. Nothing to retry.
            log.warning("offsets not committed, the group rebalanced: %s", exc)
            return
        except KafkaError as exc:  # e.g. the broker is restarting: keep them for the next commit
            log.warning("offsets not committed yet, will retry: %s", exc)
            for tp, meta in offsets.items():
                self._written.setdefault(tp, meta.offset)
            return
        self.on_committed({(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()})

    async def flush(self) -> None:
        """Wait until every batch in flight is written and settled, then commit."""
        while self._pending:
            self._check_committer()
            await asyncio.sleep(0.01)
        await self.commit()

    async def behind(self, topic: str, positions: dict[tuple[str, int], int]
                     ) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) → (committed, end) for this topic's assigned partitions where the
        group is behind; `positions` are the offsets committed by this worker so far."""
        behind = {}
        for tp, end in (await self.lag()).items():
            if tp[0] != topic:
                continue
            committed = positions.get(tp)
            if committed is None:
                committed = await self.consumer.committed(TopicPartition(*tp)) or 0
            if end > committed:
                behind[tp] = (committed, end)
        return behind

    async def starts(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """(topic, partition) → the first offset still on the log, for `partitions`: where a group
        never committed, retention may have deleted everything before the end (nothing to read)."""
        partitions = [TopicPartition(*tp) for tp in partitions]
        if not partitions or self.consumer is None:
            return {}
        starts = await self.consumer.beginning_offsets(partitions)
        return {(tp.topic, tp.partition): start for tp, start in starts.items()}

    async def lag(self) -> dict[tuple[str, int], int]:
        """(topic, partition) → end offset, for the partitions assigned now (consumer lag gauge)."""
        assigned = list(self.consumer.assignment()) if self.consumer else []
        if not assigned:
            return {}
        ends = await self.consumer.end_offsets(assigned)
        return {(tp.topic, tp.partition): end for tp, end in ends.items()}


class _Listener(ConsumerRebalanceListener):
    def __init__(self, feeder: Feeder) -> None:
        self.feeder = feeder

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        feeder = self.feeder
        feeder.generation += 1
        if feeder._assigned is not None:
            feeder._assigned.clear()
        if feeder._closing:  # the worker is stopping: its agents will not finish any batch
            return
        await feeder.flush()
        feeder.on_revoked()
        log.info("partitions revoked; in-flight batches written and committed", extra={"revoked": len(list(revoked))})

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        assigned = list(assigned)
        log.info("partitions assigned", extra={"assigned": sorted(f"{tp.topic}:{tp.partition}" for tp in assigned)})
        ready = self.feeder._assigned
        if ready is not None:
            ready.clear()
        try:
            if self.feeder.on_assigned is not None:
                await self.feeder.on_assigned({(tp.topic, tp.partition) for tp in assigned})
        except Exception as exc:
            self.feeder._assign_failed = exc  # run() raises it: nothing of these partitions goes on
            raise
        finally:
            if ready is not None:
                ready.set()
