"""The books a money command writes to (issue 37): facts appended to the log first, then projected.

    record(db, *facts)     the commit point of a change of money: the facts, appended together
                           (all or none), then projected into `db`; refused when no books are open
    using(books)           the books this command writes to, for the block it wraps
    in_use() -> Books      the books open now (BooksNotOpen when none)
    begin_numbering(db)    the numbered series taken over (fencing other writers), under the invoicing lease
    batched(db, size)      facts recorded in the block appended `size` at a time (an invoice run)
    UnloggedBooks()        projects straight into the database, no log: for tests of the rules of
                           money, never a command (tests/unit/test_books.py holds that)

Every module that changes money (tenants, balances, budgets, API keys, invoices, credit notes,
voids, billing runs, re-ratings, rule sets) builds its facts (schemas/books.py) and calls
`record`; none writes those tables itself. Which books are open is the shell's choice: the
commands, the scheduler's billing job and the workers open the log's (streams/kafka/books.py
`KafkaBooks`) around their work. A write with no books open raises instead of writing unlogged — a command that forgot
to open them is a failing test, not a silent hole in the books.

The books are reached through a context variable, not passed down: a money write sits deep under
reads that take only the database (an invoice run's tenants, a void's credit note), and the
books must be the same for every write of one command.
"""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Iterator, Protocol

from billing.errors import BillingError
from schemas.books import BooksEvent, Fact

__all__ = ["Books", "BooksNotOpen", "UnloggedBooks", "batched", "begin_numbering", "event_of", "in_use", "record",
           "using", "writer_name"]


class BooksNotOpen(BillingError):
    """A money write was attempted with no books open: a bug in the command, nothing was written."""


class Books(Protocol):
    def record(self, db: Any, events: list[BooksEvent]) -> None:
        """Append `events` (all or none) and project them into `db`; returns once both are done,
        raises when the append failed (nothing happened) or, after it, that the projection is pending."""

    def numbering(self, db: Any) -> None:
        """Take over the numbered series before a number is read (under the invoicing lease): the
        writer fences every earlier one and the projection in `db` is taken to the log's end."""


_open: ContextVar[Books | None] = ContextVar("gpubill_books", default=None)
_batch: ContextVar["_Batch | None"] = ContextVar("gpubill_books_batch", default=None)


class _Batch:
    """Facts held back to be appended `size` at a time (see `batched`)."""

    def __init__(self, db: Any, size: int) -> None:
        self.db, self.size, self.events = db, max(1, size), []

    def add(self, facts: tuple[Fact, ...]) -> None:
        self.events += [event_of(fact) for fact in facts]  # one call's facts are never split across appends
        if len(self.events) >= self.size:
            self.flush()

    def flush(self) -> None:
        if self.events:
            events, self.events = self.events, []
            in_use().record(self.db, events)


@contextmanager
def batched(db: Any, size: int) -> Iterator[None]:
    """Within the block, facts recorded into `db` are appended `size` at a time, each group in one
    transaction (all or none), the rest when the block ends; an error in the block appends nothing
    more (what was appended stays: the books). An invoice run records its invoices so: one commit
    and one projection per group instead of per invoice. Whoever numbers inside the block counts
    on from its own numbers (the projection has not seen the group yet)."""
    batch = _Batch(db, size)
    token = _batch.set(batch)
    try:
        yield
        batch.flush()
    finally:
        _batch.reset(token)


@contextmanager
def using(books: Books) -> Iterator[Books]:
    """Make `books` the books of the block (and of what it calls)."""
    token = _open.set(books)
    try:
        yield books
    finally:
        _open.reset(token)


def in_use() -> Books:
    books = _open.get()
    if books is None:
        raise BooksNotOpen("no books are open: a money command must open the books on the log before it writes "
                           "(gpubill.cli.books.open_books); nothing was written")
    return books


def writer_name() -> str:
    """host:pid, as a fact names the process that recorded it."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}"


def event_of(fact: Fact, at: datetime | None = None) -> BooksEvent:
    return BooksEvent(at=at or datetime.now(UTC), writer=writer_name(), fact=fact)


def begin_numbering(db: Any) -> None:
    """This process numbers documents from here on (billing/invoice_lock.py, once it holds the lease)."""
    in_use().numbering(db)


def record(db: Any, *facts: Fact) -> None:
    """Record `facts` in the books open now, all or none: appended, then projected into `db`."""
    if not facts:
        return
    batch = _batch.get()
    if batch is not None and batch.db is db:
        batch.add(facts)
        return
    in_use().record(db, [event_of(fact) for fact in facts])


class UnloggedBooks:
    """Books with no log: each record is projected straight into the database. Tests of the rules
    of money use it; no command may (tests/unit/test_books.py walks the product for it)."""

    def record(self, db: Any, events: list[BooksEvent]) -> None:
        from billing.books_projection import project

        project(db, events)

    def numbering(self, db: Any) -> None:
        """Nothing to fence without a log."""
