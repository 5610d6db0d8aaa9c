"""`KafkaBooks.record` (streams/kafka/books.py) against fakes of Kafka's clients: it projects only
once what it appended is readable by a read-committed reader.

A transaction's commit returns once the coordinator has decided it; the commit marker reaches
the partition a moment later, and until it does the partition's end for a read-committed
reader (the last stable offset) stops before the records just committed. A `record` that
caught up at once projected nothing then, and the next number was read from a projection that
lacked the one just issued: on the real broker, `gpubill bench month`'s invoice run of 64
tenants issued 64 invoices under 60 numbers (two invoices of one number: one overwrote the
other). The fakes below hold the end back for a few reads, as the broker does.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import streams.kafka.books as kafka_books
from gpubill.config import Settings
from schemas.books import BooksEvent, TenantFact, TenantRow
from schemas.topics import TOPIC_BOOKS
from streams.errors import ProjectionPending
from streams.kafka.books import KafkaBooks

AT = datetime(2026, 4, 1, tzinfo=UTC)
TP = kafka_books.TopicPartition(TOPIC_BOOKS, 0)


class _Sent:
    def __init__(self, offset: int) -> None:
        self.metadata = type("RecordMetadata", (), {"topic": TOPIC_BOOKS, "partition": 0, "offset": offset})()

    def get(self, timeout: float | None = None):
        return self.metadata


class _Producer:
    """A transactional producer whose records take offsets from `first` on."""

    def __init__(self, first: int) -> None:
        self.next, self.calls = first, []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def send(self, topic: str, key: bytes, value: bytes) -> _Sent:
        self.next += 1
        return _Sent(self.next - 1)

    def commit_transaction(self) -> None:
        self.calls.append("commit")


class _Consumer:
    """A read-committed reader: `end_offsets` answers `ends` in turn, then the last for ever."""

    def __init__(self, ends: list[int]) -> None:
        self.ends, self.asked, self.last = ends, 0, None

    def end_offsets(self, partitions: list) -> dict:
        assert partitions == [TP]
        self.asked += 1
        self.last = self.ends[min(self.asked, len(self.ends)) - 1]
        return {TP: self.last}


def _books(monkeypatch, first: int, ends: list[int]) -> tuple[KafkaBooks, list[int]]:
    """Numbered books on the fakes; returns them and the end each catch-up found (its caller's view)."""
    books = KafkaBooks(Settings(kafka="localhost:1"), numbered=True)
    books._producer, books._consumer = _Producer(first), _Consumer(ends)
    caught_up: list[int] = []
    monkeypatch.setattr(books, "catch_up", lambda db, progress=None: caught_up.append(books._consumer.last) or 0)
    return books, caught_up


def _events(n: int) -> list[BooksEvent]:
    return [BooksEvent(at=AT, writer="test:1", fact=TenantFact(kind="tenant_registered", tenant=TenantRow(
        tenant=f"tenant-{k}", display_name=f"Tenant {k}", status="active", created_at=AT, updated_at=AT)))
            for k in range(n)]


def test_a_record_projects_once_its_commit_is_readable(monkeypatch) -> None:
    # offsets 7 and 8 appended; the reader's end stays at 7 for three reads (the marker not written yet), then 10
    books, caught_up = _books(monkeypatch, first=7, ends=[7, 7, 7, 10])
    books.record(None, _events(2))
    assert books._producer.calls == ["begin", "commit"]
    assert books._consumer.asked == 4  # three reads found the commit not yet readable, the fourth found it
    assert caught_up == [10]  # the one catch-up ran once offsets 7 and 8 were readable


def test_a_record_readable_at_once_asks_once(monkeypatch) -> None:
    books, caught_up = _books(monkeypatch, first=3, ends=[5])
    books.record(None, _events(1))
    assert (books._consumer.asked, caught_up) == (1, [5])


def test_a_commit_never_readable_is_a_pending_projection_not_a_silent_one(monkeypatch) -> None:
    monkeypatch.setattr(kafka_books, "TIMEOUT_MS", 50)  # the bound on the wait, shortened
    books, caught_up = _books(monkeypatch, first=7, ends=[7])
    with pytest.raises(ProjectionPending, match=r"recorded on the books \(gpu\.books\.v1 offset 7\).*not readable"):
        books.record(None, _events(1))
    assert caught_up == [] and books._consumer.asked > 1
