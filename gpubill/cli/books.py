"""The books on the log, as the commands open them (issue 37; billing/books.py, streams/kafka/books.py).

    open_books(database, settings, numbered=…, rules=…)   a context: the log's books in use for its block

Every command that changes money opens the books around its work: the topic is made when
missing, the projection is taken to the log's end, and — given `rules` — the rule set in use is
recorded on the books when it is not there yet. A `numbered` command's transactional writer,
which fences any earlier one, starts under the invoicing lease (billing/invoice_lock.py). Kafka down: the command
refuses in one line before it has read or written anything.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from gpubill.config import Settings

__all__ = ["open_books"]


def _log_books(database: Any, settings: "Settings", numbered: bool) -> Any:
    """The log's books, open: the topic, the writer, the projection at the end. (Unit tests of the
    commands put UnloggedBooks here: tests/unit/conftest.py; end-to-end tests run the real one.)"""
    from streams.errors import KafkaUnreachable
    from streams.kafka.admin import nothing_listens
    from streams.kafka.books import KafkaBooks

    if nothing_listens(settings.kafka):  # definite at once; a slow broker is left to the clients' own bounds
        raise KafkaUnreachable(settings.kafka, "the books are on the log: nothing was written")
    return KafkaBooks(settings, numbered=numbered).open(database)


@contextmanager
def open_books(database: Any, settings: "Settings", *, numbered: bool = False, rules: Any = None) -> Iterator[Any]:
    """The log's books (streams.kafka.books.KafkaBooks) open and in use for the block."""
    from billing import books
    from billing.rule_sets import record_rule_set

    log = _log_books(database, settings, numbered)
    try:
        with books.using(log):
            if rules is not None:
                record_rule_set(database, rules, Path(settings.rules))
            yield log
    finally:
        if hasattr(log, "close"):
            log.close()
