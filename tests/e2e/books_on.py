"""The real books for an end-to-end test that seeds its database in its own process (issue 37):
every money write of the block appended to the test's broker, then projected — as a command's."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Iterator

from billing import books
from streams.kafka.books import KafkaBooks


@contextmanager
def books_on(db: Any, bootstrap: str) -> Iterator[KafkaBooks]:
    """The log's books open on `db` for the block (the numbered writer starts under the lease, as in a command)."""
    settings = SimpleNamespace(kafka=bootstrap, group="e2e-books", partitions=1)
    with KafkaBooks(settings, numbered=True).open(db) as log, books.using(log):
        yield log
