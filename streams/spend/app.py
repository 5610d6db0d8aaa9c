"""The spend tracker as a Faust app: keyed state in a changelog-backed table, fed by a topic
partitioned by tenant (issue 15; docs/balances.md).

    <group>.spend.v2 ──► track_spend ──► spend_rounds (table, changelog <group>.spend-spend_rounds-changelog)
    (a round per source                   │
     and spend partition)                 └──► gpu.billing-events.v1 (budget_threshold, balance_low,
                                                balance_exhausted: once each)
    refresh_context (timer) ── top-ups, invoices, credits, budgets, burn from the warehouse
                            └─ re-evaluates every tenant this worker holds (time moves runways)

It runs in `gpubill spend-tracker` (its own process: rating never waits for it) or beside
the rating app in `gpubill up` (a small site, one process), in the consumer group
`<group>.spend`: the spend partitions are shared among the trackers, and an entry moves with
its partition, recovered from the changelog. Faust commits an event's offset after the agent
handled it (at least once); a round handled again replaces itself in the table (its value is
its key's latest round, by marks), so nothing counts twice.

This module and streams/worker.py are the only ones that import Faust.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import Any, Callable

import faust

from schemas.billing_events import BillingEvent, encode_event
from schemas.spend import InvalidSpendRecord, SpendRound, parse_round, round_header, spend_partition
from schemas.topics import TOPIC_BILLING_EVENTS, spend_topic
from streams.crash import crash
from streams.kafka.logs import committed_offsets, end_offsets
from streams.kafka.settings import KafkaSettings, client_options
from streams.spend.tracker import SpendTracker

log = logging.getLogger("gpubill.spend")

TABLE = "spend_rounds"
EVALUATE_EVERY_S = 1.0  # how often changed tenants are priced and their events emitted
# The agent takes the rounds waiting on the topic together, at most TAKE_MAX, waiting at most
# TAKE_WITHIN_S for more; of the rounds of one key among them only the newest is folded.
TAKE_MAX = 2000
TAKE_WITHIN_S = 0.05


def check_faust() -> None:
    """The start-up self-check of what this adapter uses of Faust beyond its documented API:
    a stream's `take_events`, and `_set_current_event` (a table written while a buffer of
    events is handled must know which event it is written for: its changelog partition)."""
    missing = [name for name in ("take_events", "_set_current_event") if not callable(getattr(faust.Stream, name, None))]
    if missing:
        raise RuntimeError(f"faust-streaming {faust.__version__} lacks Stream.{', Stream.'.join(missing)}, which the "
                           "spend tracker uses (streams/spend/app.py): install the version pyproject.toml names")


def changelog_topic(settings: KafkaSettings) -> str:
    """The topic Faust keeps the table's changes in: its durable state."""
    return f"{settings.group}.spend-{TABLE}-changelog"


def build_tracker_app(settings: KafkaSettings, tracker: SpendTracker, *, credentials: Any,
                      refresh_contexts: Callable[[], dict] | None, executor: Executor | None,
                      context_every_s: float = 10.0,
                      publish: Callable[[list], None] | None = None) -> faust.App:
    """The tracker app; `refresh_contexts` (run in `executor`) reads the warehouse's side of
    every tenant's balance, `publish` (same thread) stores the positions for the surfaces."""
    check_faust()
    app = faust.App(
        f"{settings.group}.spend",
        broker=[f"kafka://{server.strip()}" for server in settings.kafka.split(",")],
        store="memory://",  # rebuilt from the changelog at every start: the changelog is the state
        web_enabled=False,
        topic_partitions=settings.partitions,
        producer_acks=-1,
        broker_credentials=credentials,
        consumer_auto_offset_reset="earliest",
        # As the feeder's group (streams/kafka/feeder.py): a worker that died is noticed after
        # 10 s, not Faust's 60, so its tenants move on; offsets committed twice a second, so a
        # drain that waits for them (caught_up) ends promptly.
        broker_session_timeout=10.0,
        broker_heartbeat_interval=2.0,
        broker_commit_interval=0.5,
    )
    spend = spend_topic(settings.group)
    applied: dict[int, int] = {}  # spend partition → the offset after the last record this process handled
    spend_records = app.topic(spend, key_serializer="raw", value_serializer="raw", partitions=settings.partitions)
    events_topic = app.topic(TOPIC_BILLING_EVENTS, key_serializer="raw", value_serializer="raw")
    # key: the round's key "<source partition>/<spend partition>" (JSON); value: {"round": "<its latest round>"}
    spend_rounds = app.Table(TABLE, default=None, partitions=settings.partitions,
                                schema=faust.Schema(key_type=str, key_serializer="json", value_serializer="json"))

    async def produce(event: BillingEvent, partition: int) -> None:
        sent = await events_topic.send(key=event.tenant.encode(), value=encode_event(event), partition=partition)
        await sent  # acknowledged by the broker (acks=all) before the event counts as emitted

    tracker.produce = produce

    @app.agent(spend_records, name="track_spend")
    async def track_spend(stream):
        """Fold the spend rounds waiting together into their entries (`evaluate_changed` emits
        what became due). Rounds are cumulative: of the rounds of one key waiting together only
        the newest is parsed and folded, and it holds everything the older ones do, so a tracker
        that fell behind catches up by skipping work instead of doing all of it (a thousand
        tenants: hundreds of rounds a second, a round of 125 tenants 0.6 ms to parse). Their
        offsets are committed after the whole take is handled, as one by one."""
        async for events in stream.take_events(TAKE_MAX, within=TAKE_WITHIN_S):
            try:
                yield _track_many(stream, events)
            except Exception:  # noqa: BLE001 - a tracker that stopped tracking must not linger
                crash("tracker-failed", "the spend tracker failed on a record (it is consumed again on restart)")

    def _track_many(stream: Any, events: list) -> list[SpendRound]:
        by_key: dict[tuple[int, bytes], list] = {}
        for event in events:
            message = event.message
            applied[message.partition] = max(applied.get(message.partition, 0), message.offset + 1)
            by_key.setdefault((message.partition, bytes(event.key or b"")), []).append(event)
        folded: list[SpendRound] = []
        for group in by_key.values():
            headers = [round_header(event.value or b"") for event in group]
            newest = _newest(group, headers)
            if newest is not None:
                event, oldest_ms = newest
                found = _track(stream, event, oldest_ms)
                if found:
                    for older, (_, first_ms, produced_ms) in zip(group, headers):
                        if older is not event:  # replaced unread: applied with the newest
                            tracker.observe_times(first_ms, produced_ms, sent_ms=_sent_ms(older))
                    folded += found
                    continue
            # Not all rounds of the key are as the workers write them, or the newest was refused:
            # one by one in offset order, as they arrived.
            for event in group:
                if newest is None or event is not newest[0]:
                    folded += _track(stream, event)
        return folded

    def _track(stream: Any, event: Any, oldest_ms: int | None = None) -> list[SpendRound]:
        spend_round = _accepted(tracker, event, settings.partitions)
        if spend_round is None:
            return []
        value = tracker.merge(spend_rounds.get(spend_round.key), spend_round, event.value.decode())
        if value is None:
            _refused(tracker, "older than the high-water mark", event)
            return []
        stream._set_current_event(event)  # the table's changelog goes to this event's partition (check_faust)
        spend_rounds[spend_round.key] = value
        tracker.observe(spend_round, sent_ms=_sent_ms(event))
        tracker.changed(spend_round, oldest_ms)
        return [spend_round]

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
        held = {tp.partition for tp in app.consumer.assignment() if tp.topic == spend}
        tracker.know(spend_rounds.keys())  # what the table recovered from its changelog, too
        await tracker.evaluate_many([tenant for tenant in sorted(tracker.contexts)
                                     if spend_partition(tenant, settings.partitions) in held], spend_rounds.get)
        if publish is not None:
            positions = list(tracker.positions.items())
            try:
                await loop.run_in_executor(executor, publish, positions)
            except Exception:  # noqa: BLE001 - the surfaces fall back to the warehouse
                log.warning("could not store the live spend positions", exc_info=True)

    @app.task
    async def read_context_at_start() -> None:
        await refresh()

    @app.task
    async def evaluate_changed() -> None:
        """Every EVALUATE_EVERY_S, price the tenants whose entries changed and emit what is due."""
        while True:
            await asyncio.sleep(EVALUATE_EVERY_S)
            try:
                await tracker.evaluate_dirty(spend_rounds.get)
            except Exception:  # noqa: BLE001 - as the agent: a tracker that stopped must not linger
                crash("tracker-failed", "the spend tracker failed to evaluate (its state is in the changelog)")

    @app.timer(context_every_s)
    async def refresh_context() -> None:
        await refresh()

    async def caught_up() -> None:
        """Return once every spend record produced until now is applied — by this process, or
        committed by whichever worker holds its tenant — and this worker re-evaluated the
        tenants it holds (the end of a drain)."""
        security = client_options(settings, client="aiokafka")
        ends = await end_offsets(settings.kafka, spend, security, settings.partitions)
        while True:
            done = await committed_offsets(settings.kafka, security, app.conf.id, spend, settings.partitions)
            if all(max(done.get(p, 0), applied.get(p, 0)) >= end for p, end in ends.items()):
                break
            await asyncio.sleep(0.2)
        await refresh()

    app.gpubill_tracker = tracker
    app.gpubill_caught_up = caught_up
    app.gpubill_agents = (track_spend,)
    return app


def _newest(group: list, headers: list | None = None) -> tuple[Any, int] | None:
    """Of the rounds of one key (in offset order), the last whose marks are at least every
    other's, with the oldest reading behind any of them; None when one does not start as the
    workers write rounds (schemas/spend.py `round_header`: `headers`, read here when not given)
    or no round's marks are the highest."""
    if headers is None:
        headers = [round_header(event.value or b"") for event in group]
    if any(header is None for header in headers):
        return None
    for at in range(len(group) - 1, -1, -1):
        marks = headers[at][0]
        if all(marks[0] >= other[0][0] and marks[1] >= other[0][1] for other in headers):
            # the oldest reading behind the rounds it replaces (0: unknown, as in the round)
            oldest = min((header[1] for header in headers if header[1]), default=0)
            return group[at], oldest
    return None


def _sent_ms(event: Any) -> int | None:
    timestamp = event.message.timestamp
    return int(timestamp * 1000) if timestamp else None


def _accepted(tracker: SpendTracker, event: Any, partitions: int) -> SpendRound | None:
    """The event's round when it is valid, keyed as its content says and on the spend partition
    of every tenant in it (their state lives in that partition's table); None, counted and
    logged, otherwise."""
    try:
        spend_round = parse_round(event.value or b"")
    except InvalidSpendRecord as exc:
        _refused(tracker, "invalid", event, str(exc))
        return None
    if event.key != spend_round.key.encode():
        _refused(tracker, "key", event, "the key is not <partition>/<spend partition> of the record")
        return None
    partition = event.message.partition
    if partition != spend_round.spend_partition or any(
            spend_partition(tenant, partitions) != partition for tenant in spend_round.tenants):
        _refused(tracker, "partition", event, "not on its tenants' spend partition")
        return None
    return spend_round


def _refused(tracker: SpendTracker, reason: str, event: Any, detail: str = "") -> None:
    if tracker.metrics is not None:
        tracker.metrics.spend_refused.labels(reason).inc()
    message = event.message
    log.warning("spend record refused at %s:%s@%s: %s %s", message.topic, message.partition, message.offset,
                reason, detail)
