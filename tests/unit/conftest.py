"""Unit tests write money through books with no log (billing/books.py `UnloggedBooks`): the rules
of money are tested in milliseconds, with no broker. The commands' own books are the same fake
here (gpubill/cli/books.py `_log_books`); tests/e2e runs every command on the real log.

Session-wide, so that module-scoped fixtures (a seeded database) write through them too."""

from __future__ import annotations

import pytest

from billing import books


@pytest.fixture(scope="session", autouse=True)
def _unlogged_books():
    import gpubill.cli.books

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gpubill.cli.books, "_log_books", lambda database, settings, numbered: books.UnloggedBooks())
        with books.using(books.UnloggedBooks()):
            yield
