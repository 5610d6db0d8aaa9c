"""The embedded engine's own API (chDB), behind one adapter: statements as ClickHouse's HTTP
interface runs them, for `gpubill clickhouse serve` (gpubill/devenv/ch_gateway.py).

clickhouse-connect's chDB backend opens the engine; this adapter runs each statement on a
fresh chDB handle of that same engine (about a millisecond), so its settings and USE end
with it, as they do over HTTP. At start-up the engine runs one statement and checks that
the installed chDB still offers what the adapter uses (`_self_check`); if not, the gateway
refuses to start with the reason, instead of failing request by request.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.connection import Database, redact
from warehouse.errors import DatabaseError, DsnInvalid

SHUTDOWN_WAIT_S = 30.0  # how long a stop waits for the statement in flight
TRAILING_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
ERROR_CODE = re.compile(r"Code: (\d+)\.")


class StatementFailed(DatabaseError):
    """A statement ClickHouse refused (or the engine is stopping): ClickHouse's error `code`
    and text, and the HTTP `status` a gateway answers it with."""

    def __init__(self, code: int, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.code, self.status = code, status


@dataclass(frozen=True)
class Statement:
    """One request as the engine needs it: SQL, the insert data after it, and how to run it."""

    sql: str
    data: bytes = b""
    params: dict[str, str] = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)
    database: str | None = None
    default_format: str = "TabSeparated"
    query_id: str = ""


@dataclass(frozen=True)
class Answer:
    body: bytes
    result_format: str | None  # None: the statement produces no result set
    summary: dict[str, str]


class Engine:
    """Runs statements on the embedded engine that `database` keeps open.

    Each statement gets a fresh chDB handle (about a millisecond), so its settings and USE
    end with it, as they do over HTTP. Statements run one at a time under one lock: chDB
    handles share one engine, and a small site's writes are batches anyway.
    """

    def __init__(self, database: Database) -> None:
        if not database.embedded:
            raise DsnInvalid(f"the gateway serves an embedded database, not {redact(database.dsn)}")
        self.database = database
        self.path = os.path.realpath(database.dsn[len("chdb://"):])  # how clickhouse-connect names the engine
        self.spool = Path(tempfile.mkdtemp(prefix="gpubill-gateway-"))  # insert data, one file per insert
        self.lock = threading.Lock()
        self.closed = False
        version, self.timezone = database.query("SELECT version(), timezone()")[0]
        self.version = str(version)
        self._self_check()

    def _self_check(self) -> None:
        """One statement through chDB's own API, using every result method `_summary` reads."""
        try:
            import chdb

            handle = chdb.connect(self.path)
            try:
                result = handle.query("SELECT 1", "TabSeparated")
                _summary(result)
                result.bytes()
            finally:
                handle.close()
        except Exception as exc:  # noqa: BLE001 - whatever broke, the installed chDB does not fit
            raise DatabaseError(f"the installed chDB does not fit warehouse/chdb_engine.py: {type(exc).__name__}: {exc}") from exc

    def run(self, statement: Statement) -> Answer:
        """Run one statement; raises StatementFailed with ClickHouse's own message when it fails."""
        import chdb

        with self.lock:
            if self.closed:
                raise StatementFailed(210, "Code: 210. DB::Exception: the gpubill gateway is stopping. (NETWORK_ERROR)", 503)
            handle = chdb.connect(self.path)
            try:
                self._prepare(handle, statement)
                if statement.data:
                    return self._insert(handle, statement)
                return self._query(handle, statement)
            except StatementFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - chdb raises plain RuntimeErrors as well as ChdbError
                raise self._error(exc) from exc
            finally:
                handle.close()

    def close(self) -> None:
        """Wait for the statement in flight, then refuse the rest and close the database."""
        acquired = self.lock.acquire(timeout=SHUTDOWN_WAIT_S)
        try:
            self.closed = True
            self.database.close()
            for leftover in self.spool.glob("*"):
                leftover.unlink(missing_ok=True)
            self.spool.rmdir()
        finally:
            if acquired:
                self.lock.release()

    def _prepare(self, handle, statement: Statement) -> None:
        if statement.database:
            handle.query(f"USE `{statement.database.replace('`', '``')}`", "TabSeparated")
        for name, value in statement.settings.items():
            handle.query(f"SET {name} = {_literal(value)}", "TabSeparated")

    def _insert(self, handle, statement: Statement) -> Answer:
        """INSERT ... FORMAT x with data: chDB reads data from a file, so spool it to one."""
        match = TRAILING_FORMAT.search(statement.sql)
        with tempfile.NamedTemporaryFile(dir=self.spool, suffix=".data", delete=False) as spool:
            spool.write(statement.data)
        try:
            sql = f"{statement.sql[:match.start()]}FROM INFILE {_literal(spool.name)} FORMAT {match.group(1)}"
            result = handle.query(sql, "TabSeparated", params=statement.params)
        finally:
            os.unlink(spool.name)
        return Answer(b"", None, _summary(result, written=True))

    def _query(self, handle, statement: Statement) -> Answer:
        """A statement with its own FORMAT answers in it; one without answers in the default
        format, and is run WithNames to tell "no result set" (DDL: empty) from "no rows"."""
        named = TRAILING_FORMAT.search(statement.sql)
        if named:
            result = handle.query(statement.sql, named.group(1), params=statement.params)
            return Answer(result.bytes() or b"", named.group(1), _summary(result))
        fmt = statement.default_format
        probe = fmt in ("TabSeparated", "TSV")
        result = handle.query(statement.sql, "TabSeparatedWithNames" if probe else fmt, params=statement.params)
        body = result.bytes() or b""
        if not body:
            return Answer(b"", None, _summary(result, written=True))
        if probe:
            body = body[body.find(b"\n") + 1:]
        return Answer(body, fmt, _summary(result))

    def _error(self, exc: Exception) -> StatementFailed:
        text = str(exc)
        text = text[text.find("Code: "):] if "Code: " in text else f"Code: 1002. DB::Exception: {text}. (UNKNOWN_EXCEPTION)"
        match = ERROR_CODE.search(text)
        return StatementFailed(int(match.group(1)) if match else 1002, f"{text.strip()} (version {self.version})")


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _summary(result, *, written: bool = False) -> dict[str, str]:
    """chDB's statistics under the keys of X-ClickHouse-Summary (an INFILE insert reads
    exactly the rows it writes)."""
    rows_read, bytes_read = result.rows_read(), result.bytes_read()
    rows_written = result.rows_written() or (rows_read if written else 0)
    bytes_written = result.bytes_written() or (bytes_read if written else 0)
    return {
        "read_rows": str(rows_read), "read_bytes": str(bytes_read),
        "written_rows": str(rows_written), "written_bytes": str(bytes_written),
        "total_rows_to_read": str(rows_read), "result_rows": "0", "result_bytes": "0",
        "elapsed_ns": str(int(result.elapsed() * 1_000_000_000)),
    }
