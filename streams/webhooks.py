"""Billing events → a webhook: each event on `gpu.billing-events.v1` POSTed, signed, to one
URL, with retries, every attempt recorded (`gpubill events deliver`; docs/balances.md, "Webhooks").

    deliver(event_bytes, target, *, client, record, sleep=asyncio.sleep, clock=time.time,
            record_executor=None) -> DeliveryAttempt                                    (async)
    run_deliverer(settings, target, record, *, drain=False, record_executor=None, ...) -> Delivered   (async)

`deliver` makes the attempts for one event and knows nothing of Kafka: parse the message
(an invalid one is recorded as gave_up, attempt 0, and skipped), then POST its canonical
JSON with `Gpubill-Event-Id` and `Gpubill-Signature` (schemas/webhooks.py) until the
receiver answers 2xx or `max_attempts` are spent, waiting `backoff_s(n)` after failed
attempt n (1, 2, 4 … 60 s). A connection error, a timeout (`timeout_s` for the whole
attempt, answer included) or any non-2xx answer — a redirect too: none is followed — is
a failed attempt. At most MAX_ERROR_CHARS of an answer's body are read and kept.

`run_deliverer` is the thin Kafka loop around it, in its own consumer group
`<GPUBILL_GROUP>.webhooks`, one event at a time, in partition order:

1. `deliver` the event; `record` writes each attempt (ClickHouse) as it is made — in a thread
   (`record_executor`; None: the loop's default executor), never on the event loop, which
   also heartbeats the Kafka consumer: a slow insert must not cost the group a rebalance.
2. Only then commit the event's next offset: it is delivered or given up.

A crash between 1 and 2 delivers the event again on restart (at-least-once): receivers
deduplicate on Gpubill-Event-Id, which is the same for the same event every time. If
`record` fails (the database is down), the error stops the loop before the commit, so
nothing is skipped unrecorded. A loop cancelled (shutdown) while an insert is in flight
waits for it before it ends: the attempt is recorded, the event not committed (delivered
again on restart); the caller shuts `record_executor` down before closing the database.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaConnectionError, KafkaError

from schemas.billing_events import InvalidBillingEvent, encode_event, parse_event
from schemas.topics import TOPIC_BILLING_EVENTS
from schemas.webhooks import (
    DELIVERED, EVENT_ID_HEADER, FAILED, GAVE_UP, MAX_ERROR_CHARS, SIGNATURE_HEADER, DeliveryAttempt, backoff_s,
    check_secret, check_url, shown_url, sign,
)
from streams.errors import KafkaUnreachable, StreamsError
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, consumer_options

__all__ = ["DEFAULT_MAX_ATTEMPTS", "Delivered", "WebhookTarget", "deliver", "group_of", "run_deliverer"]

log = logging.getLogger("gpubill.webhooks")

DEFAULT_MAX_ATTEMPTS = 8
TIMEOUT_S = 10.0  # one attempt, connecting to the last byte read
_READ_BYTES = 4 * MAX_ERROR_CHARS  # an answer's body read at most (UTF-8: ≤ 4 bytes a character)
USER_AGENT = "gpubill-webhooks/1"
ASSIGNMENT_TIMEOUT_S = 60  # --drain: how long joining the group may take

Record = Callable[[DeliveryAttempt], None]
Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True)
class WebhookTarget:
    """Where and how events are delivered. The secret never shows in a repr or a record."""

    url: str
    secret: str = field(repr=False)
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        check_url(self.url)
        check_secret(self.secret)
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int) \
                or not 1 <= self.max_attempts <= 100:
            raise StreamsError(f"--max-attempts must be a whole number from 1 to 100, got {self.max_attempts!r}")


@dataclass
class Delivered:
    """What a run of the deliverer did, in events (not attempts)."""

    delivered: int = 0
    gave_up: int = 0


def group_of(settings: KafkaSettings) -> str:
    """The deliverer's consumer group: the workers' group + ".webhooks" (its own offsets)."""
    return f"{settings.group}.webhooks"


async def deliver(event_bytes: bytes, target: WebhookTarget, *, client: httpx.AsyncClient, record: Record,
                  sleep: Sleep = asyncio.sleep, clock: Callable[[], float] = time.time,
                  where: str = "", record_executor: Executor | None = None) -> DeliveryAttempt:
    """Deliver one message of the topic: every attempt is passed to `record` as it is made, in
    `record_executor`'s thread (see `_recorded`); returns the last (delivered or gave_up — never
    failed). Raises only what `record` raises. `clock`: Unix seconds, for the signature's t= and
    attempted_at; `where`: the message's place (e.g. "partition 3 offset 17"), named in the
    record of an invalid message."""
    url = shown_url(target.url)
    try:
        event = parse_event(event_bytes)
    except InvalidBillingEvent as exc:
        place = f" at {where}" if where else ""
        attempt = DeliveryAttempt("", "", "", url, 0, GAVE_UP, None, f"not a billing event{place}: {exc}", 0,
                                  _at(clock()))
        await _recorded(record, attempt, record_executor)
        log.warning("invalid billing event skipped", extra={"where": where, "reason": str(exc)})
        return attempt
    body = encode_event(event)  # the canonical form, whatever spacing the producer used
    for number in range(1, target.max_attempts + 1):
        started_s, started = clock(), time.perf_counter()
        http_status, error = await _post(client, target, event.event_id, body, int(started_s))
        duration_ms = min(int((time.perf_counter() - started) * 1000), 4_294_967_295)
        status = DELIVERED if not error else GAVE_UP if number == target.max_attempts else FAILED
        attempt = DeliveryAttempt(event.event_id, event.tenant, event.kind, url, number, status, http_status,
                                  error, duration_ms, _at(started_s))
        await _recorded(record, attempt, record_executor)
        if status != FAILED:
            log.log(logging.INFO if status == DELIVERED else logging.WARNING, f"webhook {status}",
                    extra={"event_id": event.event_id, "tenant": event.tenant, "attempts": number, "error": error})
            return attempt
        await sleep(backoff_s(number))
    raise AssertionError("unreachable: the last attempt is delivered or gave_up")  # pragma: no cover


async def _recorded(record: Record, attempt: DeliveryAttempt, executor: Executor | None) -> None:
    """`record(attempt)` in `executor`'s thread, awaited without blocking the event loop. An
    insert begun is always finished before this returns or raises: cancelled meanwhile, it
    waits for the insert, then lets the cancellation through (the attempt is never lost)."""
    future = asyncio.get_running_loop().run_in_executor(executor, record, attempt)
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.wait({future})  # never cancels `future` itself, only this wait
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    future.result()  # what `record` raised


async def _post(client: httpx.AsyncClient, target: WebhookTarget, event_id: str, body: bytes,
                timestamp_s: int) -> tuple[int | None, str]:
    """(the HTTP status or None, '' when 2xx else why — at most MAX_ERROR_CHARS of the body)."""
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, EVENT_ID_HEADER: event_id,
               SIGNATURE_HEADER: sign(target.secret, timestamp_s, body)}
    try:
        async with asyncio.timeout(target.timeout_s):
            async with client.stream("POST", target.url, content=body, headers=headers) as response:
                head = await _head(response) if not response.is_success else b""
    except TimeoutError:
        return None, f"timed out after {target.timeout_s:g} s"
    except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
        # The class says what happened (ConnectError, RemoteProtocolError …); its text may be empty.
        return None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
    if response.is_success:
        return response.status_code, ""
    text = head.decode("utf-8", "replace").strip()
    where = f" → {response.headers.get('location', '')}" if response.is_redirect else ""
    return response.status_code, f"HTTP {response.status_code}{where}: {text}"[:MAX_ERROR_CHARS]


async def _head(response: httpx.Response) -> bytes:
    """The first _READ_BYTES of the body; the rest is never read (a receiver may send gigabytes)."""
    head = bytearray()
    async for chunk in response.aiter_bytes():
        head += chunk
        if len(head) >= _READ_BYTES:
            break
    return bytes(head[:_READ_BYTES])


def _at(unix_s: float) -> datetime:
    return datetime.fromtimestamp(unix_s, UTC)


async def run_deliverer(settings: KafkaSettings, target: WebhookTarget, record: Record, *, drain: bool = False,
                        consumer: Any = None, client: httpx.AsyncClient | None = None,
                        sleep: Sleep = asyncio.sleep, record_executor: Executor | None = None) -> Delivered:
    """Consume `gpu.billing-events.v1` in the group `group_of(settings)` and deliver each event,
    committing its offset after (see the module's steps). Runs until cancelled; with `drain`,
    returns once every partition assigned at the start is delivered up to its end offset then.
    `record` runs in `record_executor`'s thread (None: the loop's default executor).
    `consumer` and `client`: made here unless given (tests)."""
    consumer = consumer or AIOKafkaConsumer(
        TOPIC_BILLING_EVENTS, bootstrap_servers=settings.kafka.split(","), group_id=group_of(settings),
        enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=100,
        request_timeout_ms=TIMEOUT_MS + 1000,
        # An event may take 8 attempts of ≤ 10 s and 123 s of waits (≈ 3.4 min) before the next
        # poll: the group must not think the deliverer dead meanwhile (heartbeats go on).
        max_poll_interval_ms=15 * 60 * 1000,
        **consumer_options(settings, client="aiokafka"))
    try:
        await consumer.start()
    except KafkaConnectionError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    done = Delivered()
    own_client = client is None
    client = client or httpx.AsyncClient(follow_redirects=False, timeout=target.timeout_s)
    try:
        ends: dict[TopicPartition, int] | None = None
        next_offsets: dict[TopicPartition, int] = {}
        joined_by = time.monotonic() + ASSIGNMENT_TIMEOUT_S
        while True:
            fetched = await consumer.getmany(timeout_ms=500)
            if drain and ends is None:
                if consumer.assignment():
                    ends, next_offsets = await _drain_targets(consumer, fetched)
                elif time.monotonic() > joined_by:
                    raise StreamsError(f"no partition of {TOPIC_BILLING_EVENTS} was assigned to the deliverer within "
                                       f"{ASSIGNMENT_TIMEOUT_S} s: does the topic exist, and is another deliverer "
                                       f"of group {group_of(settings)} holding every partition?")
            for tp, messages in fetched.items():
                for message in messages:
                    if tp not in consumer.assignment():
                        break  # revoked meanwhile: its new owner starts from the committed offset
                    # 1. Deliver: every attempt is recorded before deliver() returns.
                    last = await deliver(message.value or b"", target, client=client, record=record, sleep=sleep,
                                         where=f"partition {tp.partition} offset {message.offset}",
                                         record_executor=record_executor)
                    done.delivered += last.status == DELIVERED
                    done.gave_up += last.status == GAVE_UP
                    # 2. Commit: delivered or given up, never to be sent again by this group.
                    await _commit(consumer, tp, message.offset + 1, settings.kafka)
                    next_offsets[tp] = message.offset + 1
            if ends is not None and await _drained(consumer, ends, next_offsets):
                return done
    finally:
        if own_client:
            await client.aclose()
        await consumer.stop()


async def _drain_targets(consumer: Any, fetched: dict) -> tuple[dict, dict]:
    """(end offsets of the assigned partitions now, where each starts: the first fetched
    message's offset, else the consumer's position)."""
    assigned = list(consumer.assignment())
    ends = await consumer.end_offsets(assigned)
    starts = {}
    for tp in assigned:
        messages = fetched.get(tp)
        starts[tp] = messages[0].offset if messages else await consumer.position(tp)
    return ends, starts


async def _drained(consumer: Any, ends: dict, next_offsets: dict) -> bool:
    """Whether every partition is delivered up to its end offset: by the offsets delivered, or
    by the consumer's position where only what a committed reader never gets (a transaction's
    marker, an aborted transaction's records) lay before the end. Every fetched event is
    delivered before this is asked, so the position is never ahead of an undelivered one."""
    for tp, end in ends.items():
        if next_offsets.get(tp, 0) >= end:
            continue
        if tp not in consumer.assignment() or await consumer.position(tp) < end:
            return False
    return True


async def _commit(consumer: Any, tp: TopicPartition, offset: int, bootstrap: str) -> None:
    """Commit `offset` for `tp`; a partition taken away meanwhile is redelivered by its new owner."""
    try:
        await consumer.commit({tp: offset})
    except (CommitFailedError, IllegalStateError) as exc:
        log.warning("offset not committed: the partition was reassigned, the event may be delivered again",
                    extra={"partition": tp.partition, "offset": offset, "error": str(exc)})
    except KafkaError as exc:
        raise KafkaUnreachable(bootstrap, f"commit: {exc}") from exc
