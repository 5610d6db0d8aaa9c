"""Webhook attempts are recorded off the event loop (issue 22, item 4.2): the loop that
delivers them also heartbeats the Kafka consumers, so a slow ClickHouse insert must not stop
it; and an insert begun is finished even when the deliverer is cancelled (shutdown)."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from schemas.webhooks import DeliveryAttempt
from streams.webhooks import WebhookTarget, deliver, run_deliverer
from tests.unit.test_webhooks import BODY, SECRET, FakeConsumer, Receiver, Settings, answer

INSERT_S = 1.0  # the slowed insert
TICK_S = 0.05


class SlowRecords:
    """A `record` whose insert takes INSERT_S; notes the thread it ran in and when it was done."""

    def __init__(self) -> None:
        self.recorded: list[DeliveryAttempt] = []
        self.threads: list[str] = []
        self.started = threading.Event()

    def __call__(self, attempt: DeliveryAttempt) -> None:
        self.threads.append(threading.current_thread().name)
        self.started.set()
        time.sleep(INSERT_S)
        self.recorded.append(attempt)


async def ticking(ticks: list[float]) -> None:
    while True:
        ticks.append(time.monotonic())
        await asyncio.sleep(TICK_S)


def test_the_event_loop_keeps_running_while_an_attempt_is_inserted():
    records = SlowRecords()
    with Receiver(answer(200)) as receiver:
        async def go() -> tuple[DeliveryAttempt, list[float]]:
            ticks: list[float] = []
            ticker = asyncio.ensure_future(ticking(ticks))
            async with httpx.AsyncClient(follow_redirects=False) as client:
                last = await deliver(BODY, WebhookTarget(receiver.url, SECRET), client=client, record=records)
            ticker.cancel()
            return last, ticks

        last, ticks = asyncio.run(go())
    assert last.status == "delivered" and records.recorded == [last]
    # the ticker ticked on through the whole insert (before: not once until it returned)
    assert len(ticks) >= 0.6 * INSERT_S / TICK_S, f"{len(ticks)} ticks during a {INSERT_S} s insert"
    assert max(b - a for a, b in zip(ticks, ticks[1:])) < 0.5
    assert records.threads != [threading.main_thread().name]


def test_a_cancelled_deliverer_finishes_the_insert_it_began():
    """Shutdown cancels the deliverer mid-insert: the attempt is still recorded before the task
    ends (and its event, not committed, is delivered again on restart)."""
    records = SlowRecords()
    with Receiver(answer(200)) as receiver:
        async def go() -> tuple[list, bool]:
            async with httpx.AsyncClient(follow_redirects=False) as client:
                task = asyncio.ensure_future(deliver(BODY, WebhookTarget(receiver.url, SECRET), client=client,
                                                     record=records))
                assert await asyncio.to_thread(records.started.wait, 10)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
                return list(records.recorded), task.cancelled()

        recorded_when_ended, cancelled = asyncio.run(go())
    assert cancelled and len(recorded_when_ended) == 1 and recorded_when_ended[0].status == "delivered"


def test_the_deliverer_records_in_the_executor_it_is_given():
    """`gpubill up` hands run_deliverer a thread of its own for the records (and shuts it down,
    waiting, before the database closes); commits still follow the records."""
    records = SlowRecords()
    log: list = []
    consumer = FakeConsumer({0: [BODY]}, log)
    executor = ThreadPoolExecutor(1, thread_name_prefix="webhook-records")
    with Receiver(answer(200)) as receiver:
        async def go():
            async with httpx.AsyncClient(follow_redirects=False) as client:
                return await run_deliverer(Settings(), WebhookTarget(receiver.url, SECRET), records, drain=True,
                                           consumer=consumer, client=client, record_executor=executor)

        done = asyncio.run(go())
    executor.shutdown(wait=True)
    assert done.delivered == 1 and len(records.recorded) == 1
    assert records.threads[0].startswith("webhook-records")
    assert log == ["start", ("commit", 0, 1), "stop"]  # committed after the record returned
