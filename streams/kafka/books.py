"""The books on the log (issue 37): `gpu.books.v1`, appended by money commands, projected into ClickHouse.

    KafkaBooks(settings, numbered=…)   the books of one command (billing/books.py's `Books`):
        .open(db)                      the topic made when missing; the writer; the projection taken to the end
        .record(db, events)            appended (acks=all, all or none), then projected: the commit point
        .catch_up(db, progress=)       the projection taken from its stamped position to the log's end
    read_books(settings, progress=)    every event from the beginning: [(offset, BooksEvent)] (rebuild, verify-log)

The topic has one partition: money facts are a few thousand a month, and one partition gives
them one order — the order they are projected and rebuilt in, and the order numbers are taken
in. Messages are keyed by tenant (docs/books.md argues both). It is kept for ever.

One writer per numbered series, fenced by Kafka. A command that numbers documents (an invoice
run or issue, a credit note, a void, a re-rating's apply) opens the books `numbered`: its
producer is transactional with `transactional.id` NUMBERED_WRITER, and `init_transactions`
fences every producer that opened that id before (their open transaction is aborted, their
next commit fails). Only then does it take the projection to the log's end (read committed)
and read the highest number from it. A fenced writer's commit raises ProducerFencedError:
`record` refuses in one line (BooksFenced) and nothing of it is on the books. So two hosts
issuing at once never reuse nor skip a number: the one that opened last numbers after
everything the earlier one committed, and the earlier one can commit nothing more. The
invoicing lease (billing/invoice_lock.py) still keeps two runs on one database from
interleaving; the log decides between databases.

Facts that take no number (tenants, top-ups, budgets, keys, rule sets) are appended by an
idempotent producer, acks=all, one at a time.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

from billing.books_projection import positions, project, stamp
from schemas.books import BooksEvent, UnreadableFact, decode_event, encode_event
from schemas.topics import TOPIC_BOOKS
from streams.errors import BooksFenced, BooksHalted, KafkaUnreachable, ProjectionPending
from streams.kafka.admin import ensure_topics
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options, consumer_options
from warehouse.errors import WarehouseError

__all__ = ["BOOKS_TOPIC_CONFIG", "KafkaBooks", "NUMBERED_WRITER", "ensure_books_topic", "read_books"]

BOOKS_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
BOOKS_PARTITIONS = 1
NUMBERED_WRITER = "gpubill.books.numbered"  # the transactional.id of the numbered series' writer
PROJECT_BATCH = 2_000  # events projected (and stamped) at a time while catching up


def ensure_books_topic(settings: KafkaSettings) -> None:
    ensure_topics(settings.kafka, {TOPIC_BOOKS: BOOKS_PARTITIONS}, options=client_options(settings, client="kafka-python"),
                  configs={TOPIC_BOOKS: BOOKS_TOPIC_CONFIG})


def _consumer(settings: KafkaSettings) -> KafkaConsumer:
    try:
        return KafkaConsumer(bootstrap_servers=settings.kafka.split(","), enable_auto_commit=False,
                             request_timeout_ms=TIMEOUT_MS + 1000, bootstrap_timeout_ms=TIMEOUT_MS,
                             max_partition_fetch_bytes=8 * 1024 * 1024,
                             **consumer_options(settings, client="kafka-python"))
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc


class KafkaBooks:
    """The books of one command: see the module docstring. Use as a context manager, or open/close."""

    def __init__(self, settings: KafkaSettings, *, numbered: bool = False, writer_id: str = NUMBERED_WRITER) -> None:
        self.settings = settings
        self.numbered = numbered
        self.writer_id = writer_id
        self._producer: KafkaProducer | None = None
        self._consumer: KafkaConsumer | None = None

    # -------------------------------------------------------------------------- lifecycle

    def open(self, db: Any) -> "KafkaBooks":
        ensure_books_topic(self.settings)
        self._consumer = _consumer(self.settings)
        options = dict(bootstrap_servers=self.settings.kafka.split(","), acks="all", linger_ms=0,
                       max_block_ms=TIMEOUT_MS, request_timeout_ms=TIMEOUT_MS, bootstrap_timeout_ms=TIMEOUT_MS,
                       enable_idempotence=True, max_request_size=4 * 1024 * 1024,
                       **client_options(self.settings, client="kafka-python"))
        if self.numbered:
            # A writer killed inside a transaction holds the partition's stable offset back until the
            # coordinator aborts it: at most this long (or at once, when the next writer opens).
            options.update(transactional_id=self.writer_id, transaction_timeout_ms=30_000)
        try:
            self._producer = KafkaProducer(**options)
            if self.numbered:
                self._producer.init_transactions()  # fences every earlier writer of the series
        except KafkaError as exc:
            self.close()
            raise KafkaUnreachable(self.settings.kafka, f"the books' writer cannot start: {exc}") from exc
        self.catch_up(db)
        return self

    def open_reader(self) -> "KafkaBooks":
        """Open for reading only (a rebuild, verify-log): the topic made when missing, no writer."""
        ensure_books_topic(self.settings)
        self._consumer = _consumer(self.settings)
        return self

    def close(self) -> None:
        for client in (self._producer, self._consumer):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close(timeout=5) if client is self._producer else client.close()
        self._producer = self._consumer = None

    # --------------------------------------------------------------------------- writing

    def record(self, db: Any, events: list[BooksEvent]) -> None:
        """Append `events` (all or none: one transaction when numbered), wait for every replica, then
        project. Before the append fails: nothing happened (KafkaUnreachable, BooksFenced). After
        it: the facts are the books; a projection that fails says so (ProjectionPending)."""
        producer = self._producer
        if producer is None:
            raise RuntimeError("KafkaBooks.record before open")
        try:
            if self.numbered:
                producer.begin_transaction()
            futures = [producer.send(TOPIC_BOOKS, key=event.fact.key().encode(), value=encode_event(event))
                       for event in events]
            if self.numbered:
                producer.commit_transaction()
            else:
                producer.flush(timeout=TIMEOUT_MS / 1000)
            appended = [future.get(timeout=TIMEOUT_MS / 1000) for future in futures]
        except (ProducerFencedError, InvalidProducerEpochError) as exc:
            raise BooksFenced(f"another writer of the numbered series opened the books after this one (Kafka fenced "
                              f"{self.writer_id!r}): nothing of this change was recorded; run the command again "
                              "once the other is done") from exc
        except KafkaError as exc:
            if self.numbered:
                with contextlib.suppress(Exception):
                    producer.abort_transaction()
            raise KafkaUnreachable(self.settings.kafka, f"the books did not take the change, nothing was "
                                                        f"recorded: {exc}") from exc
        last = {}
        for metadata in appended:
            tp = TopicPartition(metadata.topic, metadata.partition)
            last[tp] = max(last.get(tp, -1), metadata.offset)
        try:
            self._await_committed(last)
            self.catch_up(db)
        except WarehouseError as exc:
            raise ProjectionPending(f"recorded on the books ({TOPIC_BOOKS} offset {max(last.values())}), but "
                                    f"ClickHouse did not take it yet ({exc}); the next command or worker projects "
                                    "it") from exc

    def _await_committed(self, last: dict[TopicPartition, int]) -> None:
        """Until a read-committed reader sees each partition's `last` offset. A transaction's commit
        returns once the coordinator has decided it; its marker reaches the partition a moment
        later, and until then the partition's end for this reader (the last stable offset) stops
        before the records just committed: a catch-up then would project nothing, and the next
        number would be read from a projection that lacks this one (the same number twice)."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("KafkaBooks.record before open")
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        try:
            while True:
                ends = consumer.end_offsets(list(last))
                if all(ends[tp] > offset for tp, offset in last.items()):
                    return
                if time.monotonic() >= deadline:
                    raise ProjectionPending(f"recorded on the books ({TOPIC_BOOKS} offset {max(last.values())}), but "
                                            f"its commit is not readable after {TIMEOUT_MS / 1000:.0f} s; the next "
                                            "command or worker projects it")
                time.sleep(0.002)
        except KafkaError as exc:
            raise ProjectionPending(f"recorded on the books ({TOPIC_BOOKS} offset {max(last.values())}), but the books "
                                    f"cannot be read back ({exc}); the next command or worker projects it") from exc

    # --------------------------------------------------------------------------- reading

    def catch_up(self, db: Any, progress: Callable[[int], None] | None = None) -> int:
        """Project every committed event after the stamped position, to the log's end; returns how many.
        BooksHalted at a message that cannot be read (its position stamped with why)."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("KafkaBooks.catch_up before open")
        stamped = positions(db, TOPIC_BOOKS)
        taken = 0
        try:
            partitions = [TopicPartition(TOPIC_BOOKS, p) for p in sorted(consumer.partitions_for_topic(TOPIC_BOOKS) or ())]
            consumer.assign(partitions)
            ends = consumer.end_offsets(partitions)
            for tp in partitions:
                start = stamped[tp.partition].next_offset if tp.partition in stamped else 0
                if start >= ends[tp]:
                    continue
                consumer.seek(tp, start)
                taken += self._take(db, consumer, tp, start, ends[tp], progress)
        except KafkaError as exc:
            raise KafkaUnreachable(self.settings.kafka, f"the books cannot be read: {exc}") from exc
        return taken

    def _take(self, db: Any, consumer: KafkaConsumer, tp: TopicPartition, start: int, end: int,
              progress: Callable[[int], None] | None) -> int:
        batch: list[BooksEvent] = []
        taken, position = 0, start
        while consumer.position(tp) < end:
            for record in consumer.poll(timeout_ms=1000, max_records=PROJECT_BATCH).get(tp, []):
                if record.offset >= end:
                    break
                try:
                    batch.append(decode_event(record.value))
                except UnreadableFact as exc:
                    self._flush(db, tp, batch, record.offset)
                    why = f"{TOPIC_BOOKS} partition {tp.partition} offset {record.offset}: {exc}"
                    stamp(db, TOPIC_BOOKS, tp.partition, record.offset, halted=why)
                    raise BooksHalted(f"the books' projection stopped at {why}") from None
                position = record.offset + 1
                if len(batch) >= PROJECT_BATCH:
                    taken += self._flush(db, tp, batch, position)
                    batch = []
                    if progress:
                        progress(taken)
        taken += self._flush(db, tp, batch, max(position, consumer.position(tp)))
        if progress:
            progress(taken)
        return taken

    @staticmethod
    def _flush(db: Any, tp: TopicPartition, batch: list[BooksEvent], next_offset: int) -> int:
        """Step 1: the rows of `batch`; step 2: the position after it (see billing/books_projection.py)."""
        project(db, batch)
        stamp(db, TOPIC_BOOKS, tp.partition, next_offset)
        return len(batch)

    def __enter__(self) -> "KafkaBooks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_books(settings: KafkaSettings) -> list[tuple[int, BooksEvent | UnreadableFact]]:
    """Every committed message of the books from the beginning: (offset, its event or why it cannot be read)."""
    ensure_books_topic(settings)
    consumer = _consumer(settings)
    out: list[tuple[int, BooksEvent | UnreadableFact]] = []
    try:
        tp = TopicPartition(TOPIC_BOOKS, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        while consumer.position(tp) < end:
            for record in consumer.poll(timeout_ms=1000).get(tp, []):
                if record.offset >= end:
                    break
                try:
                    out.append((record.offset, decode_event(record.value)))
                except UnreadableFact as exc:
                    out.append((record.offset, exc))
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, f"the books cannot be read: {exc}") from exc
    finally:
        consumer.close()
    return out
