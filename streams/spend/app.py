"""The spend tracker as a Faust app: its table of spend rounds kept in memory and in a
changelog topic (streams/spend/table.py), fed by a feeder of its own from a topic partitioned
by tenant (issue 15; docs/balances.md).

    <group>.spend.v2 ──► Feeder ──► channel ──► track_spend ──► table (changelog <group>.spend-spend_rounds-changelog)
    (a round per source     (group <group>.spend)   │
     and spend partition)                           └──► gpu.billing-events.v1 (budget_threshold,
                                                          balance_low, balance_exhausted: once each)
    refresh_context (timer) ── top-ups, invoices, credits, budgets, burn from the warehouse
                            └─ re-evaluates every tenant this worker holds (time moves runways)

It runs in `gpubill spend-tracker` (its own process: rating never waits for it) or beside
the rating app in `gpubill up` (a small site, one process), in the consumer group
`<group>.spend`: the spend partitions are shared among the trackers, and an entry moves with
its partition, recovered from the changelog before the partition's first round is taken.

Once only: the feeder hands the agent the rounds of a fetch; the agent folds them into the
table, produces the entries it changed to the changelog and waits for the broker's
acknowledgement, and only then lets the feeder commit their offsets (at least once). A round
handled again replaces itself in the table (its value is its key's latest round, by marks),
so nothing counts twice.

Why not Faust's table and consumer: at 1,000 tenants the rounds waited ≈ 1 s in Faust's
consumer path before the agent saw them, where a plain aiokafka consumer in the same process
saw them 0.02 s after they were produced (streams/faust_app.py, docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import Any, Callable

import faust

from schemas.billing_events import BillingEvent, encode_event
from schemas.spend import InvalidSpendRecord, SpendRound, parse_round, round_header, spend_partition
from schemas.topics import TOPIC_BILLING_EVENTS, spend_changelog_topic, spend_topic
from streams.crash import crash
from streams.errors import StreamsError
from streams.faust_app import faust_self_check, fed_app, open_flow
from streams.kafka.feeder import Batch, Feeder
from streams.kafka.logs import committed_offsets, end_offsets, latest_values
from streams.kafka.settings import KafkaSettings, client_options
from streams.kafka.spend_producer import MAX_CHANGELOG_BATCH_BYTES, BatchedProducer
from streams.spend.table import RoundsTable
from streams.spend.tracker import SpendTracker

log = logging.getLogger("gpubill.spend")

EVALUATE_EVERY_S = 1.0  # how often changed tenants are priced and their events emitted
STOP_WAIT_S = 10.0  # a stop waits this long for the batch being folded (then leaves it uncommitted)


def build_tracker_app(settings: KafkaSettings, tracker: SpendTracker, *,
                      refresh_contexts: Callable[[], dict] | None, executor: Executor | None,
                      context_every_s: float = 10.0,
                      publish: Callable[[list], None] | None = None) -> faust.App:
    """The tracker app; `refresh_contexts` (run in `executor`) reads the warehouse's side of
    every tenant's balance, `publish` (same thread) stores the positions for the surfaces."""
    problems = faust_self_check()
    if problems:
        raise StreamsError(f"the installed faust-streaming does not fit the spend tracker: {'; '.join(problems)}")
    app = fed_app(f"{settings.group}.spend", settings)  # the id names Faust's producer (billing events)
    spend, group = spend_topic(settings.group), f"{settings.group}.spend"
    security = client_options(settings, client="aiokafka")
    changelog_topic = spend_changelog_topic(settings.group)
    changelog = BatchedProducer(settings.kafka, changelog_topic, security, what="the spend table's changelog",
                                max_batch_bytes=MAX_CHANGELOG_BATCH_BYTES)
    table = RoundsTable(changelog.send, lambda partitions: latest_values(
        settings.kafka, changelog_topic, security, settings.partitions, partitions))
    applied: dict[int, int] = {}  # spend partition → the offset after the last record this process folded
    held: set[int] = set()  # the spend partitions assigned to this process now
    events_topic = app.topic(TOPIC_BILLING_EVENTS, key_serializer="raw", value_serializer="raw")
    rounds_channel = app.channel()
    folding: set[asyncio.Future] = set()  # the batch being folded and flushed
    stopping = asyncio.Event()
    taken_over = asyncio.Event()  # set once this process has its first assignment, its table recovered

    async def produce(event: BillingEvent, partition: int) -> None:
        sent = await events_topic.send(key=event.tenant.encode(), value=encode_event(event), partition=partition)
        await sent  # acknowledged by the broker (acks=all) before the event counts as emitted

    tracker.produce = produce

    @app.agent(rounds_channel, name="track_spend")
    async def track_spend(batches):
        """Fold each fed batch of spend rounds into the table (`evaluate_changed` emits what
        became due), put the changed entries on the changelog, then let the batch commit."""
        async for batch in batches:
            done = asyncio.ensure_future(_fold(batch))
            folding.add(done)
            try:
                yield await done
            finally:
                folding.discard(done)

    async def _fold(batch: Batch) -> int:
        try:
            folded = _track_many(batch.take())
            await table.flush()  # on the changelog, acknowledged: only now may the offsets be committed
        except Exception:  # noqa: BLE001 - a tracker that stopped tracking must not linger
            if stopping.is_set():  # the changelog's producer closed by a stop: left uncommitted, re-read
                log.warning("the tracker stops: a batch of spend rounds is left uncommitted")
                return 0
            crash("tracker-failed", "the spend tracker failed on a batch (it is consumed again on restart)")
        for (_, partition), offset in batch.positions.items():
            applied[partition] = max(applied.get(partition, 0), offset)
        batch.finish(len(folded))
        return len(folded)

    def _track_many(messages: list) -> list[SpendRound]:
        """Rounds are cumulative: of the rounds of one key in a batch only the newest is parsed
        and folded, and it holds everything the older ones do, so a tracker that fell behind
        catches up by skipping work instead of doing all of it (a thousand tenants: hundreds of
        rounds a second, a round of 125 tenants 0.6 ms to parse)."""
        by_key: dict[tuple[int, bytes], list] = {}
        for message in messages:
            by_key.setdefault((message.partition, bytes(message.key or b"")), []).append(message)
        folded: list[SpendRound] = []
        for group_of_key in by_key.values():
            headers = [round_header(message.value or b"") for message in group_of_key]
            newest = _newest(group_of_key, headers)
            if newest is not None:
                message, oldest_ms = newest
                found = _track(message, oldest_ms)
                if found:
                    for older, (_, first_ms, produced_ms) in zip(group_of_key, headers):
                        if older is not message:  # replaced unread: applied with the newest
                            tracker.observe_times(first_ms, produced_ms, sent_ms=_sent_ms(older))
                    folded += found
                    continue
            # Not all rounds of the key are as the workers write them, or the newest was refused:
            # one by one in offset order, as they arrived.
            for message in group_of_key:
                if newest is None or message is not newest[0]:
                    folded += _track(message)
        return folded

    def _track(message: Any, oldest_ms: int | None = None) -> list[SpendRound]:
        spend_round = _accepted(tracker, message, settings.partitions)
        if spend_round is None:
            return []
        value = tracker.merge(table.get(spend_round.key), spend_round, message.value.decode())
        if value is None:
            _refused(tracker, "older than the high-water mark", message)
            return []
        table.put(spend_round.key, value, message.partition)  # the changelog partition is the round's
        tracker.observe(spend_round, sent_ms=_sent_ms(message))
        tracker.changed(spend_round, oldest_ms)
        return [spend_round]

    async def recover(assigned: set[tuple[str, int]]) -> None:
        """Before any round of the newly assigned spend partitions is taken: their entries, read
        back from the changelog (the feeder revoked every partition before: nothing else held)."""
        partitions = {partition for topic, partition in assigned if topic == spend}
        try:
            entries = await table.recover(partitions)
        except Exception:  # noqa: BLE001 - folding onto an empty table would lose the predecessor's rounds
            crash("spend-takeover", "could not read the spend table's changelog at an assignment")
        held.clear()
        held.update(partitions)
        tracker.know(table.keys())
        taken_over.set()
        log.info("spend partitions assigned", extra={"partitions": sorted(partitions), "entries": entries})

    def revoked() -> None:
        """The partitions' batches are folded, flushed and committed: another tracker takes them."""
        held.clear()
        table.drop()

    async def refresh() -> None:
        """Re-read the warehouse's side and re-evaluate every tenant held here: a top-up, a new
        budget or an hour of burn changes what is due without any new spend record."""
        if refresh_contexts is None:
            return
        loop = asyncio.get_running_loop()
        try:
            tracker.contexts = await loop.run_in_executor(executor, refresh_contexts)
        except Exception:  # noqa: BLE001 - the last contexts stay; the next tick retries
            log.warning("could not read balances for the spend tracker", exc_info=True)
            return
        await tracker.evaluate_many([tenant for tenant in sorted(tracker.contexts)
                                     if spend_partition(tenant, settings.partitions) in held], table.get)
        if publish is not None:
            positions = list(tracker.positions.items())
            try:
                await loop.run_in_executor(executor, publish, positions)
            except Exception:  # noqa: BLE001 - the surfaces fall back to the warehouse
                log.warning("could not store the live spend positions", exc_info=True)

    async def feed_rounds(batch: Batch) -> None:
        await rounds_channel.send(value=batch)

    feeder = Feeder(settings.kafka, group, routes={spend: feed_rounds}, on_assigned=recover, on_revoked=revoked,
                    security=security, record_sets=False)

    @app.task
    async def feed() -> None:
        """Run the feeder once the agent listens; if it fails the process exits uncommitted."""
        while not rounds_channel.subscriber_count:
            await asyncio.sleep(0.01)
        open_flow(app)
        try:
            await feeder.run()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a tracker that no longer consumes must not linger
            crash("feeder-failed", "the spend tracker's feeder failed (what was not committed is read again)")

    @app.task
    async def read_context_at_start() -> None:
        """The first evaluation of every tenant held, once the group assigned this process its
        partitions and their entries are recovered (before, it holds none)."""
        await taken_over.wait()
        await refresh()

    @app.task
    async def evaluate_changed() -> None:
        """Every EVALUATE_EVERY_S, price the tenants whose entries changed and emit what is due."""
        while True:
            await asyncio.sleep(EVALUATE_EVERY_S)
            try:
                await tracker.evaluate_dirty(table.get)
            except Exception:  # noqa: BLE001 - as the agent: a tracker that stopped must not linger
                crash("tracker-failed", "the spend tracker failed to evaluate (its state is in the changelog)")

    @app.timer(context_every_s)
    async def refresh_context() -> None:
        await refresh()

    async def caught_up() -> None:
        """Return once every spend record produced until now is applied — by this process, or
        committed by whichever worker holds its tenant — and this worker re-evaluated the
        tenants it holds (the end of a drain). Not before this process has its partitions: a
        tracker with nothing left to fold would otherwise evaluate none of them."""
        await taken_over.wait()
        ends = await end_offsets(settings.kafka, spend, security, settings.partitions)
        while True:
            done = await committed_offsets(settings.kafka, security, group, spend, settings.partitions)
            if all(max(done.get(p, 0), applied.get(p, 0)) >= end for p, end in ends.items()):
                break
            await asyncio.sleep(0.2)
        await refresh()

    async def close_changelog() -> None:
        """At a stop, once the batch being folded is flushed (at most STOP_WAIT_S: what is not
        done then stays uncommitted, to be read again): close the changelog's producer."""
        stopping.set()
        if folding:
            await asyncio.wait(set(folding), timeout=STOP_WAIT_S)
        await changelog.stop()

    app.gpubill_on_stop = close_changelog
    app.gpubill_tracker = tracker
    app.gpubill_caught_up = caught_up
    app.gpubill_agents = (track_spend,)
    app.gpubill_feeder = feeder
    return app


def _newest(group: list, headers: list | None = None) -> tuple[Any, int] | None:
    """Of the rounds of one key (in offset order), the last whose marks are at least every
    other's, with the oldest reading behind any of them; None when one does not start as the
    workers write rounds (schemas/spend.py `round_header`: `headers`, read here when not given)
    or no round's marks are the highest."""
    if headers is None:
        headers = [round_header(message.value or b"") for message in group]
    if any(header is None for header in headers):
        return None
    for at in range(len(group) - 1, -1, -1):
        marks = headers[at][0]
        if all(marks[0] >= other[0][0] and marks[1] >= other[0][1] for other in headers):
            # the oldest reading behind the rounds it replaces (0: unknown, as in the round)
            oldest = min((header[1] for header in headers if header[1]), default=0)
            return group[at], oldest
    return None


def _sent_ms(message: Any) -> int | None:
    """When the round was appended to the spend topic (ms), as the broker stamped it."""
    return message.timestamp if message.timestamp and message.timestamp > 0 else None


def _accepted(tracker: SpendTracker, message: Any, partitions: int) -> SpendRound | None:
    """The message's round when it is valid, keyed as its content says and on the spend
    partition of every tenant in it (their state lives in that partition's table); None,
    counted and logged, otherwise."""
    try:
        spend_round = parse_round(message.value or b"")
    except InvalidSpendRecord as exc:
        _refused(tracker, "invalid", message, str(exc))
        return None
    if message.key != spend_round.key.encode():
        _refused(tracker, "key", message, "the key is not <partition>/<spend partition> of the record")
        return None
    partition = message.partition
    if partition != spend_round.spend_partition or any(
            spend_partition(tenant, partitions) != partition for tenant in spend_round.tenants):
        _refused(tracker, "partition", message, "not on its tenants' spend partition")
        return None
    return spend_round


def _refused(tracker: SpendTracker, reason: str, message: Any, detail: str = "") -> None:
    if tracker.metrics is not None:
        tracker.metrics.spend_refused.labels(reason).inc()
    log.warning("spend record refused at %s:%s@%s: %s %s", message.topic, message.partition, message.offset,
                reason, detail)
