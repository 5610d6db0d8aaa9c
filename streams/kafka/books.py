"""The books on the log (issue 37): `gpu.books.v1`, appended by money commands, projected into ClickHouse.

    KafkaBooks(settings, numbered=…)   the books of one command (billing/books.py's `Books`):
        .open(db)                      the topic made when missing; the projection taken to the end
        .numbering(db)                 the numbered series' writer started (fencing the others), under the lease
        .record(db, events)            appended (acks=all, all or none), then projected: the commit point
        .catch_up(db, progress=)       the projection taken from its stamped position to the log's end
        .open_reader()                 reading only (rebuild, verify-log)
    read_books(settings)               every message from the beginning: [(offset, BooksEvent or why not)]

The topic has one partition: money facts are a few thousand a month, and one partition gives
them one order — the order they are projected and rebuilt in, and the order numbers are taken
in. Messages are keyed by tenant (docs/books.md argues both). It is kept for ever.

One writer per numbered series, fenced by Kafka. A command that numbers documents (an invoice
run or issue, a credit note, a void, a re-rating's apply) opens the books `numbered`; once it
holds the invoicing lease, `numbering` starts a transactional producer with `transactional.id`
NUMBERED_WRITER, whose `init_transactions` fences every producer that opened that id before
(their open transaction is aborted, their next commit fails). Only then does it take the
projection to the log's end (read committed) and read the highest number from it. A fenced
writer's commit fails (kafka-python says so in several forms; the log is read to tell whether
it happened after all): `record` refuses in one line (BooksFenced) and nothing of it is on the
books. So two hosts
issuing at once never reuse nor skip a number: the one that opened last numbers after
everything the earlier one committed, and the earlier one can commit nothing more. The
invoicing lease (billing/invoice_lock.py) still keeps two runs on one database from
interleaving; the log decides between databases.

Facts that take no number (tenants, top-ups, budgets, keys, rule sets) are appended by an
idempotent producer, acks=all, one at a time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

from billing.books_projection import positions, project, stamp
from schemas.books import BooksEvent, UnreadableFact, decode_event, encode_event
from schemas.topics import TOPIC_BOOKS
from streams.errors import BooksFenced, BooksHalted, KafkaUnreachable, ProjectionPending, TopicsNotCreated
from streams.kafka.admin import ensure_topics
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options, consumer_options
from usage.failpoints import pause_at
from warehouse.errors import WarehouseError

log = logging.getLogger("gpubill.books")

# How long the numbered writer waits for an acknowledgement before its transaction fails (and is
# tried again once, see KafkaBooks.record): at least the request timeout and a retry, far below
# kafka-python's 120 s — which a writer whose transaction coordinator died waits in full.
DELIVERY_TIMEOUT_MS = 2 * TIMEOUT_MS

__all__ = ["BOOKS_TOPIC_CONFIG", "KafkaBooks", "NUMBERED_WRITER", "ensure_books_topic", "read_books"]

BOOKS_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
BOOKS_PARTITIONS = 1
NUMBERED_WRITER = "gpubill.books.numbered"  # the transactional.id of the numbered series' writer
# Facts made under the invoicing lease, which only the numbered series' writer may append: a
# number read from the projection is only safe once that writer fenced every other.
NUMBERED_KINDS = frozenset({"draft_made", "draft_refreshed", "invoice_issued", "invoice_voided", "credit_note_issued",
                            "billing_run_completed", "rerate_published", "payment_recorded", "payment_reversed",
                            "credit_applied", "invoice_written_off"})
PROJECT_BATCH = 2_000  # events projected (and stamped) at a time while catching up


def ensure_books_topic(settings: KafkaSettings) -> None:
    """The books topic, made when missing; refused in one line when it exists with more than one
    partition (made by hand, or auto-created by a client with the broker's defaults): the books are
    one order, and a fact on another partition would be read by nobody."""
    counts = ensure_topics(settings.kafka, {TOPIC_BOOKS: BOOKS_PARTITIONS},
                           options=client_options(settings, client="kafka-python"),
                           configs={TOPIC_BOOKS: BOOKS_TOPIC_CONFIG})
    if counts.get(TOPIC_BOOKS, BOOKS_PARTITIONS) != BOOKS_PARTITIONS:
        raise TopicsNotCreated(f"{TOPIC_BOOKS} has {counts[TOPIC_BOOKS]} partitions at {settings.kafka}; the books need "
                               "exactly one (docs/books.md): recreate it with one partition, retention.ms=-1, before "
                               "anything is recorded")


def _consumer(settings: KafkaSettings) -> KafkaConsumer:
    try:
        return KafkaConsumer(bootstrap_servers=settings.kafka.split(","), enable_auto_commit=False,
                             request_timeout_ms=TIMEOUT_MS + 1000, bootstrap_timeout_ms=TIMEOUT_MS,
                             max_partition_fetch_bytes=8 * 1024 * 1024,
                             # the books are read to an end known beforehand: a fetch that finds only a
                             # transaction's marker there comes back at once, not after the default 500 ms
                             fetch_max_wait_ms=20,
                             # never made by a metadata request with the broker's defaults (8 partitions, a
                             # week's retention): ensure_books_topic makes it, one partition, kept for ever
                             allow_auto_create_topics=False,
                             **consumer_options(settings, client="kafka-python"))
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc


class KafkaBooks:
    """The books of one command: see the module docstring. Use as a context manager, or open/close."""

    def __init__(self, settings: KafkaSettings, *, numbered: bool = False, writer_id: str = NUMBERED_WRITER) -> None:
        self.settings = settings
        self.numbered = numbered
        self.writer_id = writer_id
        self._producer: KafkaProducer | None = None  # the plain writer: facts that take no number
        self._txn: KafkaProducer | None = None  # the numbered series' writer, once `numbering` started it
        self._consumer: KafkaConsumer | None = None
        # How far this process knows the projection to be (partition → next offset), and whether its
        # last append was a transaction, whose commit marker then sits right after it.
        self._next: dict[int, int] = {}
        self._marker_after = False

    # -------------------------------------------------------------------------- lifecycle

    def open(self, db: Any) -> "KafkaBooks":
        """The topic (made when missing), the projection taken to the log's end. The writers start
        when first needed: the plain one at the first fact that takes no number, a numbered command's
        transactional one under the invoicing lease (`numbering`)."""
        self._consumer = _consumer(self.settings)
        try:
            known = self._consumer.partitions_for_topic(TOPIC_BOOKS)  # the cluster's metadata: no admin client
        except KafkaError as exc:
            self.close()
            raise KafkaUnreachable(self.settings.kafka, f"the books cannot be read: {exc}") from exc
        if known != {0}:  # missing (made now), or more partitions than the books may have (refused)
            ensure_books_topic(self.settings)
        self.catch_up(db)
        return self

    def _plain(self) -> KafkaProducer:
        if self._producer is None:
            try:
                self._producer = KafkaProducer(**self._producer_options())
            except KafkaError as exc:
                raise KafkaUnreachable(self.settings.kafka, f"the books' writer cannot start: {exc}") from exc
        return self._producer

    def numbering(self, db: Any) -> None:
        """Take over the numbered series (billing/invoice_lock.py calls it once it holds the lease,
        before any number is read): a transactional writer starts afresh — `init_transactions`
        fences every earlier one, in this process or another, on this database or another — and
        the projection is taken to the log's end. Every record after it is one transaction."""
        if not self.numbered:
            raise RuntimeError("a numbered change on books opened without numbered=True")
        if self._txn is not None:
            with contextlib.suppress(Exception):
                self._txn.close(timeout=5)
            self._txn = None
        self._start_writer()
        self.catch_up(db)

    def _start_writer(self) -> None:
        """A transactional writer started afresh: `init_transactions` finds the transaction
        coordinator, settles any transaction an earlier writer of this id left open (commits one
        the coordinator already prepared, aborts the rest) and fences that writer."""
        # A writer killed inside a transaction holds the partition's stable offset back until the
        # coordinator aborts it: at most this long (or at once, when the next writer opens).
        # A record not acknowledged within DELIVERY_TIMEOUT_MS fails (kafka-python's default, 120 s,
        # is how long a writer whose coordinator died waits: see `record`).
        options = {**self._producer_options(), "transactional_id": self.writer_id, "transaction_timeout_ms": 30_000,
                   "delivery_timeout_ms": DELIVERY_TIMEOUT_MS}
        try:
            self._txn = KafkaProducer(**options)
            self._txn.init_transactions()
        except KafkaError as exc:
            raise KafkaUnreachable(self.settings.kafka, f"the numbered series' writer cannot start: {exc}") from exc

    def _producer_options(self) -> dict:
        return dict(bootstrap_servers=self.settings.kafka.split(","), acks="all", linger_ms=0,
                    max_block_ms=TIMEOUT_MS, request_timeout_ms=TIMEOUT_MS, bootstrap_timeout_ms=TIMEOUT_MS,
                    enable_idempotence=True, max_request_size=4 * 1024 * 1024, allow_auto_create_topics=False,
                    **client_options(self.settings, client="kafka-python"))

    def open_reader(self) -> "KafkaBooks":
        """Open for reading only (a rebuild, verify-log): the topic made when missing, no writer."""
        ensure_books_topic(self.settings)
        self._consumer = _consumer(self.settings)
        return self

    def close(self) -> None:
        for producer in (self._txn, self._producer):
            if producer is not None:
                with contextlib.suppress(Exception):
                    producer.close(timeout=5)
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
        self._producer = self._txn = self._consumer = None

    # --------------------------------------------------------------------------- writing

    def record(self, db: Any, events: list[BooksEvent], *, again: bool = True) -> None:
        """Append `events` (all or none: one transaction once `numbering` started the numbered writer),
        wait for every replica, then project. Before the append fails: nothing happened
        (KafkaUnreachable, BooksFenced). After it: the facts are the books; a projection that fails
        says so (ProjectionPending).

        A transaction that fails for want of its coordinator (its broker died: kafka-python's
        writer keeps asking the dead node and never looks the coordinator up again, until its
        records expire) is tried `again` once, with a writer started afresh — which settles the
        failed transaction first — provided the books took nothing meanwhile: then the numbers
        the change carries are still the next ones (tests/e2e/test_cluster_faults_e2e.py kills
        the books' leader under a numbering host)."""
        if self._consumer is None:
            raise RuntimeError("KafkaBooks.record before open")
        transactional = self._txn is not None
        producer = self._txn if transactional else self._plain()
        if not transactional and (len(events) > 1 or any(e.fact.kind in NUMBERED_KINDS for e in events)):
            raise RuntimeError("a numbered fact (or facts recorded together) outside the numbered series' writer: "
                               "numbering() first (billing/invoice_lock.py does, under the lease)")
        try:
            if transactional:
                producer.begin_transaction()
            futures = [producer.send(TOPIC_BOOKS, key=event.fact.key().encode(), value=encode_event(event))
                       for event in events]
            if transactional:
                producer.commit_transaction()
            else:
                producer.flush(timeout=TIMEOUT_MS / 1000)
            written = [future.get(timeout=TIMEOUT_MS / 1000) for future in futures]
        except KafkaError as exc:
            if transactional:
                with contextlib.suppress(Exception):
                    producer.abort_transaction()
            # An append that failed may still have happened (a timeout after the broker took it; a
            # commit whose outcome the coordinator decides — kafka-python reports a fence in several
            # forms): the log says which, and "nothing was recorded" is said only when it is so.
            if transactional and not _fenced(exc) and again:
                # a writer and a reader afresh: this process's may both still ask a broker that died
                written = self._settled_again(db, events, exc)
                if written is None:
                    log.warning("the books' transaction failed (%s); appended again by a writer started afresh", exc)
                    return self.record(db, events, again=False)
            else:
                written = self._found(events)
            if written is None:
                if transactional and _fenced(exc):
                    raise BooksFenced(f"another writer of the numbered series opened the books after this one "
                                      f"(Kafka fenced {self.writer_id!r}): nothing of this change was recorded; run "
                                      "the command again once the other is done") from exc
                raise KafkaUnreachable(self.settings.kafka, f"the books did not take the change, nothing was "
                                                            f"recorded: {exc}") from exc
        offsets = [meta.offset for meta in written]
        pause_at("books-appended")  # usage/failpoints.py: on the books, not yet projected
        try:
            if not self._project_own(db, events, written):
                self.catch_up(db, through=offsets[-1])
        except WarehouseError as exc:
            raise ProjectionPending(f"recorded on the books ({TOPIC_BOOKS} offset {offsets[-1]}), but ClickHouse did "
                                    f"not take it yet ({exc}); the next command or worker projects it") from exc
        self._marker_after = transactional

    def _settled_again(self, db: Any, events: list[BooksEvent], failure: KafkaError) -> list | None:
        """After a failed transaction: start the writer afresh, which settles it at the coordinator.
        The positions of `events` when it was committed after all; None when it was not and the
        books took nothing else meanwhile (the change may be appended again); KafkaUnreachable when
        they did (its numbers may be taken: the command is run again)."""
        with contextlib.suppress(Exception):
            self._txn.close(timeout=1)
        self._txn = None
        self._start_writer()
        # and a reader afresh: kafka-python's may still ask the broker that died
        with contextlib.suppress(Exception):
            self._consumer.close()
        self._consumer = _consumer(self.settings)
        written = self._found(events)
        if written is not None:
            return written
        if self.catch_up(db):
            raise KafkaUnreachable(self.settings.kafka, f"the books did not take the change ({failure}), and took "
                                                        "another meanwhile: nothing of this change was recorded; "
                                                        "run the command again") from failure
        return None

    def _found(self, events: list[BooksEvent], wait_s: float = 3.0, read_s: float = 30.0) -> list | None:
        """The positions of `events` on the log when a transaction holding them was committed after
        all (their exact bytes after this process's last known position, read committed), else None.
        Waits up to `wait_s` for a commit the coordinator is still completing, and up to `read_s` for a
        log that cannot be read (a leader moving); KafkaUnreachable when it still cannot: then nobody
        can say the change is not on it."""
        consumer, start = self._consumer, self._next.get(0)
        if consumer is None or start is None:
            return None
        wanted = [encode_event(event) for event in events]
        tp = TopicPartition(TOPIC_BOOKS, 0)
        began = time.monotonic()
        deadline = began + wait_s
        while True:
            try:
                consumer.assign([tp])
                consumer.seek(tp, start)
                end = consumer.end_offsets([tp])[tp]
                seen: dict[bytes, object] = {}
                while consumer.position(tp) < end:
                    for record in consumer.poll(timeout_ms=1000).get(tp, []):
                        if record.offset < end and record.value in wanted:
                            seen[record.value] = _Written(tp.partition, record.offset)
            except KafkaError as exc:  # not "not there": it cannot be told yet (a leader moving)
                if time.monotonic() - began > read_s:
                    raise KafkaUnreachable(self.settings.kafka, f"the books' append failed and whether it was "
                                                                f"recorded cannot be read now ({exc}); run the command "
                                                                "again: it takes what the books hold first") from exc
                deadline = time.monotonic() + wait_s
                time.sleep(1.0)
                continue
            if all(value in seen for value in wanted):
                return [seen[value] for value in wanted]
            if time.monotonic() > deadline:
                return None
            time.sleep(0.2)

    def _project_own(self, db: Any, events: list[BooksEvent], written: list) -> bool:
        """Project `events` as appended, without reading them back, when nothing else is on the log
        between what this process projected last and them: their offsets follow on from its position
        (after its own last transaction's marker) with no gap. False when something may be: then the
        log is read from the position (catch_up), which takes what is between too."""
        partition = written[0].partition
        known = self._next.get(partition)
        if known is None or any(meta.partition != partition for meta in written):
            return False
        first = known + (1 if self._marker_after else 0)
        if [meta.offset for meta in written] != list(range(first, first + len(written))):
            return False
        self._flush(db, TopicPartition(TOPIC_BOOKS, partition), events, written[-1].offset + 1)
        self._next[partition] = written[-1].offset + 1
        return True

    # --------------------------------------------------------------------------- reading

    def catch_up(self, db: Any, progress: Callable[[int], None] | None = None, through: int | None = None) -> int:
        """Project every committed event after the stamped position, to the log's end; returns how many.
        `through`: an offset this writer just appended, which the end must pass first. BooksHalted at a
        message that cannot be read (its position stamped with why)."""
        consumer = self._consumer
        if consumer is None:
            raise RuntimeError("KafkaBooks.catch_up before open")
        stamped = positions(db, TOPIC_BOOKS)
        taken = 0
        try:
            partitions = [TopicPartition(TOPIC_BOOKS, p) for p in sorted(consumer.partitions_for_topic(TOPIC_BOOKS) or ())]
            consumer.assign(partitions)
            ends = self._ends(consumer, partitions, through)
            for tp in partitions:
                start = stamped[tp.partition].next_offset if tp.partition in stamped else 0
                if start < ends[tp]:
                    consumer.seek(tp, start)
                    taken += self._take(db, consumer, tp, start, ends[tp], progress)
                self._next[tp.partition] = max(start, ends[tp])
            self._marker_after = False
        except KafkaError as exc:
            raise KafkaUnreachable(self.settings.kafka, f"the books cannot be read: {exc}") from exc
        return taken

    def _ends(self, consumer: KafkaConsumer, partitions: list[TopicPartition], through: int | None) -> dict:
        """The end offsets read committed (the last stable offset). A transaction's commit returns
        before its markers are on the partition, and until they are, the stable offset stays at the
        transaction's first message: wait for it to pass `through`, or the writer would number its
        next document without the one it just issued."""
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while True:
            ends = consumer.end_offsets(partitions)
            if through is None or max(ends.values(), default=0) > through:
                return ends
            if time.monotonic() > deadline:
                raise ProjectionPending(f"recorded on the books ({TOPIC_BOOKS} offset {through}), but the broker has "
                                        f"not made it readable within {TIMEOUT_MS // 1000} s; the next command or "
                                        "worker projects it")
            time.sleep(0.005)

    def _take(self, db: Any, consumer: KafkaConsumer, tp: TopicPartition, start: int, end: int,
              progress: Callable[[int], None] | None) -> int:
        batch: list[BooksEvent] = []
        taken, position = 0, start
        while consumer.position(tp) < end:
            for record in consumer.poll(timeout_ms=50, max_records=PROJECT_BATCH).get(tp, []):
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
        # Everything before `end` was read (records in order, the transactions' markers skipped);
        # the consumer may have fetched past it, and those are not projected yet: stamp `end`.
        taken += self._flush(db, tp, batch, end)
        if progress:
            progress(taken)
        return taken

    @staticmethod
    def _flush(db: Any, tp: TopicPartition, batch: list[BooksEvent], next_offset: int) -> int:
        """Step 1: the rows of `batch`; step 2: the position after it (see billing/books_projection.py)."""
        project(db, batch)
        pause_at("books-projected")  # usage/failpoints.py: the rows written, their position not yet stamped
        stamp(db, TOPIC_BOOKS, tp.partition, next_offset)
        return len(batch)

    def __enter__(self) -> "KafkaBooks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class _Written:
    """Where a fact found on the log is (as the producer's record metadata says it)."""

    partition: int
    offset: int


def _fenced(exc: BaseException) -> bool:
    """Whether kafka-python's error means another writer fenced this one: ProducerFencedError or an
    invalid epoch as such, or wrapped in the text of a transactional error state."""
    return isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)) or any(
        name in str(exc) for name in ("ProducerFenced", "InvalidProducerEpoch", "EPOCH_FENCE"))


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
