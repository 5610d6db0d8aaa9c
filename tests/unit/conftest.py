"""Unit tests write money through books with no log (billing/books.py `UnloggedBooks`): the rules
of money are tested in milliseconds, with no broker. The commands' own books are the same fake
here (gpubill/cli/books.py `_log_books`), and the benchmarks' private brokers are not started
(gpubill/bench/broker.py); tests/e2e runs every command on the real log.

Session-wide, so that module-scoped fixtures (a seeded database) write through them too."""

from __future__ import annotations

import pytest

from billing import books


class _NoBroker:
    """A benchmark's private broker (gpubill.devenv.kafka_broker.LocalBroker), not started: the
    books it would carry are UnloggedBooks here."""

    def __init__(self, home, bootstrap: str, port: int, controller_port: int) -> None:
        self.bootstrap = bootstrap

    def up(self, progress=None) -> bool:
        return True

    def down(self) -> bool:
        return True

    def running_pid(self) -> None:
        return None


@pytest.fixture(scope="session", autouse=True)
def _unlogged_books():
    import gpubill.bench.broker
    import gpubill.cli.books

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gpubill.cli.books, "_log_books", lambda database, settings, numbered: books.UnloggedBooks())
        patch.setattr(gpubill.bench.broker, "LocalBroker", _NoBroker)
        with books.using(books.UnloggedBooks()):
            yield
