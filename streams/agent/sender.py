"""The spool → Kafka, in spool order, acks=all, retrying for ever.

Why kafka-python and not aiokafka: the agent is two plain threads (the sampler on the
second, this sender) and needs a blocking `flush` to know what Kafka acknowledged; the
project already builds its kafka-python producers with the same security options
(streams/kafka/settings.py `client_options`). aiokafka would bring an event loop to a
program that has nothing else to await.

One round (`send_once`), its steps and what each guarantees:

 1. take up to `batch_records` readings from the spool's cursor on (spool.peek);
 2. send each to its topic (usage → gpu.usage.v1, power → gpu.power.v1), key = gpu_uuid,
    value = the spooled bytes, then flush: wait for every acknowledgement (acks=all, the
    idempotent producer: the client's own retries add no duplicates);
 3. acknowledge to the spool the longest prefix of the batch Kafka acknowledged
    (spool.ack moves the cursor durably, then deletes whole segments);
 4. if any reading failed (the broker away or refusing, a topic missing): one `kafka` fault,
    the producer is dropped, and after a backoff (doubling to `max_backoff_s`) the next
    round starts again at the cursor: the failed readings and any after them are sent again
    in spool order. A reading Kafka took but whose acknowledgement was lost is sent again:
    a duplicate with the same bytes, which the worker drops (same event_id).

Per card, order holds: one card's readings share a key, hence a partition, and each
round sends them in spool order; a resend goes after what Kafka already has.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Protocol

from schemas.topics import READING_TOPICS
from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.spool import Spool

log = logging.getLogger("gpubill.agent.sender")


class Producer(Protocol):
    """What the sender needs of a Kafka producer (kafka-python's KafkaProducer has it)."""

    def send(self, topic: str, value: bytes, key: bytes) -> Any: ...

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float | None = None) -> None: ...


def kafka_producer(bootstrap: str, options: dict[str, Any]) -> Producer:
    """kafka-python's producer as the agent needs it: acks=all, idempotent, never creating a topic
    (a node must not create the readings topics with the broker's default partition count)."""
    from kafka import KafkaProducer

    return KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks="all",
        enable_idempotence=True,
        allow_auto_create_topics=False,
        linger_ms=5,
        batch_size=256 * 1024,
        max_block_ms=5_000,  # metadata of an absent broker: fail the round, back off, retry
        request_timeout_ms=10_000,
        delivery_timeout_ms=30_000,
        bootstrap_timeout_ms=5_000,
        reconnect_backoff_max_ms=5_000,
        **options,
    )


class Sender:
    """Sends the spool to Kafka from a thread of its own (`start`, `stop`)."""

    def __init__(self, spool: Spool, connect: Callable[[], Producer], *, metrics: AgentMetrics, faults: Faults,
                 bootstrap: str = "", batch_records: int = 5000, flush_timeout_s: float = 30.0,
                 max_backoff_s: float = 5.0, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.spool = spool
        self.connect = connect
        self.metrics = metrics
        self.faults = faults
        self.bootstrap = bootstrap
        self.batch_records = batch_records
        self.flush_timeout_s = flush_timeout_s
        self.max_backoff_s = max_backoff_s
        self.clock = clock
        self._stop = threading.Event()
        self.sleep = sleep or self._stop.wait
        self._producer: Producer | None = None
        self._backoff_s = 0.0
        self._thread: threading.Thread | None = None
        self.failures = 0  # rounds that failed, for tests and the closing line

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpubill-agent-sender", daemon=True)
        self._thread.start()

    def stop(self, wait_s: float = 10.0) -> None:
        """Stop after the round in progress (at most `wait_s`); what is not acknowledged stays spooled."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait_s)
        self._drop_producer()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.send_once()
            except Exception:  # a bug must not end the sending silently: log, back off, go on
                log.exception("the sender's round failed unexpectedly; retrying")
                self._drop_producer()
                self.sleep(1.0)

    def send_once(self) -> int:
        """One round (module docstring); the number of readings acknowledged."""
        batch = self.spool.peek(self.batch_records)
        if not batch.records:
            self.spool.ack(batch.end, 0)  # marks only: nothing to send, the cursor may pass them
            self.spool.wait(0.5)
            return 0
        failure: BaseException | None = None
        futures = []
        try:
            if self._producer is None:
                self._producer = self.connect()
            for record in batch.records:
                futures.append(self._producer.send(READING_TOPICS[record.kind], value=record.value, key=record.key))
            self._producer.flush(timeout=self.flush_timeout_s)
        except Exception as exc:  # kafka-python's errors and its NoBrokersAvailable alike
            failure = exc
        acked = 0
        for future in futures:
            if not (future.is_done and future.succeeded()):
                if failure is None:
                    failure = future.exception if future.is_done else TimeoutError("not acknowledged in time")
                break
            acked += 1
        if acked == len(batch.records) and failure is None:
            self.spool.ack(batch.end, acked)
        elif acked:
            self.spool.ack(batch.records[acked - 1].end, acked)
        if acked:
            self.metrics.acked.inc(acked)
            self.metrics.send_lag.set(max(0.0, self.clock() - batch.records[acked - 1].appended_ms / 1000))
        if failure is not None:
            self.failures += 1
            self._drop_producer()
            self._backoff_s = min(self.max_backoff_s, max(0.5, self._backoff_s * 2))
            self.faults.report("kafka", f"Kafka at {self.bootstrap} did not acknowledge "
                               f"{len(batch.records) - acked} readings ({type(failure).__name__}: {failure}); they "
                               f"stay spooled ({self.spool.unacked} in all), retrying every {self._backoff_s:g} s",
                               key="kafka")
            self.sleep(self._backoff_s)
        else:
            self._backoff_s = 0.0
        return acked

    def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=0)
            except Exception:  # closing a producer whose broker is gone: nothing left to save
                pass
