"""A migrated embedded database for a test in a fraction of the time migrating one takes.

Opening a fresh chDB database and running every migration costs about a second; a copy of
one migrated database costs a fifth of that. `migrated_dsn(path)` copies the process's
template (made once, before the first test: tests/conftest.py) to `path` and returns its
DSN; `open_database` on it then finds every migration applied. The copy is a plain
directory copy: ClickHouse keeps relative links inside its data directory, so the copy is
a database of its own (tests/unit/test_db_migrate.py holds a copy to a fresh migration).

Tests of migrating itself (tests/unit/test_db_migrate.py) open fresh databases as before.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

_template: Path | None = None


def make_template() -> Path:
    """The migrated template of this process, made on the first call. chDB runs one database
    at a time in a process: call it while no other is open (tests/conftest.py does, first)."""
    global _template
    if _template is None:
        from warehouse.connection import open_database

        root = Path(tempfile.mkdtemp(prefix="gpubill-chdb-template-"))
        atexit.register(shutil.rmtree, root, True)
        with open_database(f"chdb://{root / 'clickhouse'}"):
            pass
        _template = root / "clickhouse"
    return _template


def migrated_dsn(path: Path) -> str:
    """The DSN of a new, migrated database at `path` (a copy of the template)."""
    shutil.copytree(make_template(), path, symlinks=True)
    return f"chdb://{path}"
