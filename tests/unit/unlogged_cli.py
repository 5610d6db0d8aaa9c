"""`gpubill` for unit tests that run a command in a process of its own: the same entry point, with
the books as tests/unit/conftest.py has them (UnloggedBooks: no broker). End-to-end tests run the
real `python -m gpubill.cli` on the real log."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

if __name__ == "__main__":
    import gpubill.cli.books
    from billing import books
    from gpubill.cli import main

    gpubill.cli.books._log_books = lambda database, settings, numbered: books.UnloggedBooks()
    main()
