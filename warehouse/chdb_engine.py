"""The embedded engine's own API (chDB), behind one adapter: statements as ClickHouse's HTTP
interface runs them, for `gpubill clickhouse serve` (gpubill/devenv/ch_gateway.py).

clickhouse-connect's chDB backend opens the engine; this adapter runs each statement on a
fresh chDB handle of that same engine (about a millisecond), so its settings and USE end
with it, as they do over HTTP. At start-up the engine runs one statement and checks that
the installed chDB still offers what the adapter uses (`_self_check`); if not, the gateway
refuses to start with the reason, instead of failing request by request.

What a statement may do is the gateway's decision (gpubill/devenv/gateway/sql_guard.py); this
adapter only offers it ClickHouse's own reading of the statement before it runs (`run`'s
`inspect`: EXPLAIN AST and formatQuery on the same handle) and applies, after the client's
settings, the settings the gateway forces (limits, readonly).

Statements run in lanes: one at a time per lane, lanes side by side (chDB runs statements of
several handles at once), so the gateway gives each user a lane and a reader's long query
never holds the pipeline's writes. A statement carries a cancel marker (its `log_comment`)
by which `cancel` stops it from another thread (`KILL QUERY … ASYNC`), e.g. when its client
has gone away.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.connection import Database, redact
from warehouse.errors import DatabaseError, DsnInvalid

SHUTDOWN_WAIT_S = 30.0  # how long a stop waits for the statement in flight
LOCK_WAIT_S = 300.0  # how long a statement waits for the one in flight before it is refused as busy
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
    forced_settings: dict[str, str] = field(default_factory=dict)  # applied after `settings`, in order
    cancel_marker: str = ""  # set as log_comment, so that `Engine.cancel` finds the statement


Inspect = Callable[[str, str], None]  # (formatQuery's text, EXPLAIN AST's text); raises to refuse


@dataclass(frozen=True)
class Answer:
    body: bytes
    result_format: str | None  # None: the statement produces no result set
    summary: dict[str, str]


class Engine:
    """Runs statements on the embedded engine that `database` keeps open.

    Each statement gets a fresh chDB handle (about a millisecond), so its settings and USE
    end with it, as they do over HTTP. Statements of one lane run one at a time under its
    lock (a small site's writes are batches anyway); lanes run side by side.
    """

    def __init__(self, database: Database, *, lock_wait_s: float = LOCK_WAIT_S) -> None:
        if not database.embedded:
            raise DsnInvalid(f"the gateway serves an embedded database, not {redact(database.dsn)}")
        self.database = database
        self.path = os.path.realpath(database.dsn[len("chdb://"):])  # how clickhouse-connect names the engine
        self.spool = Path(tempfile.mkdtemp(prefix="gpubill-gateway-"))  # insert data, one file per insert
        self.lock = threading.Lock()  # the default lane's
        self._lanes: dict[str, threading.Lock] = {"": self.lock}
        self._lanes_lock = threading.Lock()
        self.lock_wait_s = lock_wait_s
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

    def run(self, statement: Statement, inspect: Inspect | None = None, *, lane: str = "") -> Answer:
        """Run one statement in `lane`; raises StatementFailed with ClickHouse's own message when
        it fails, or 503 when the statement in flight in its lane holds it longer than `lock_wait_s`.

        With `inspect`, the statement is first read by ClickHouse's parser on the same handle
        (EXPLAIN AST, then formatQuery; neither runs it) and `inspect` may refuse it by raising.
        The caller makes sure the text is one statement: chDB runs every statement of a
        multi-statement text, EXPLAIN's included."""
        import chdb

        lock = self._lane(lane)
        if not lock.acquire(timeout=self.lock_wait_s):
            raise StatementFailed(202, f"Code: 202. DB::Exception: the gpubill gateway is busy: a statement has held "
                                       f"it for over {self.lock_wait_s:.0f} s. (TOO_MANY_SIMULTANEOUS_QUERIES)", 503)
        try:
            if self.closed:
                raise StatementFailed(210, "Code: 210. DB::Exception: the gpubill gateway is stopping. (NETWORK_ERROR)", 503)
            handle = chdb.connect(self.path)
            try:
                if inspect is not None:
                    inspect(*self._reading(handle, statement))  # its refusal goes out as it is
                return self._execute(handle, statement)
            finally:
                handle.close()
        finally:
            lock.release()

    def cancel(self, marker: str) -> None:
        """Stop the statement running with `cancel_marker` = `marker` (none: nothing happens).
        Asynchronous: the statement ends with QUERY_WAS_CANCELLED in its own thread."""
        import chdb

        if not marker or self.closed:
            return
        try:
            handle = chdb.connect(self.path)
            try:
                handle.query(f"KILL QUERY WHERE Settings['log_comment'] = {_literal(marker)} ASYNC", "TabSeparated")
            finally:
                handle.close()
        except Exception:  # noqa: BLE001 - a statement that just ended cannot be killed; the caller retries
            pass

    def table_names(self) -> list[str]:
        """The tables and views of the engine's current database."""
        return [str(row[0]) for row in self.database.query(
            "SELECT name FROM system.tables WHERE database = currentDatabase()")]

    def current_database(self) -> str:
        return str(self.database.query("SELECT currentDatabase()")[0][0])

    def close(self) -> None:
        """Wait for the statements in flight, then refuse the rest and close the database."""
        with self._lanes_lock:
            lanes = list(self._lanes.values())
        acquired = [lock for lock in lanes if lock.acquire(timeout=SHUTDOWN_WAIT_S)]
        try:
            self.closed = True
            self.database.close()
            for leftover in self.spool.glob("*"):
                leftover.unlink(missing_ok=True)
            self.spool.rmdir()
        finally:
            for lock in acquired:
                lock.release()

    def _lane(self, lane: str) -> threading.Lock:
        with self._lanes_lock:
            return self._lanes.setdefault(lane, threading.Lock())

    def _execute(self, handle, statement: Statement) -> Answer:
        try:
            self._prepare(handle, statement)
            if statement.data:
                return self._insert(handle, statement)
            return self._query(handle, statement)
        except StatementFailed:
            raise
        except Exception as exc:  # noqa: BLE001 - chdb raises plain RuntimeErrors as well as ChdbError
            raise self._error(exc) from exc

    def _reading(self, handle, statement: Statement) -> tuple[str, str]:
        """ClickHouse's reading of the statement: EXPLAIN AST (a syntax error is the client's
        answer, as if it had run) and the canonical text. A trailing FORMAT of a query is
        left out of EXPLAIN (it would format EXPLAIN's own output); an INSERT's is its input."""
        sql = statement.sql
        named = TRAILING_FORMAT.search(sql)
        if named and not re.match(r"\s*INSERT\b", sql, re.IGNORECASE):
            sql = sql[:named.start()]
        try:
            ast = handle.query(f"EXPLAIN AST {sql}", "TabSeparatedRaw", params=statement.params).bytes() or b""
            formatted = handle.query(f"SELECT formatQuery({_literal(statement.sql)})", "TabSeparatedRaw").bytes() or b""
        except Exception as exc:  # noqa: BLE001 - as in _execute
            raise self._error(exc) from exc
        return formatted.decode("utf-8", "replace"), ast.decode("utf-8", "replace")

    def _prepare(self, handle, statement: Statement) -> None:
        """USE the database, then one SET of the client's settings and the forced ones (in
        that order: a forced setting overrides the client's, and readonly comes last)."""
        if statement.database:
            handle.query(f"USE `{statement.database.replace('`', '``')}`", "TabSeparated")
        forced = dict(statement.forced_settings)
        if statement.cancel_marker:
            forced = {"log_comment": statement.cancel_marker, **forced}  # readonly stays last
        settings = {**statement.settings, **forced}
        for name in forced:  # forced ones go after the client's, whatever it sent
            settings[name] = settings.pop(name)
        if settings:
            handle.query("SET " + ", ".join(f"{name} = {_literal(value)}" for name, value in settings.items()),
                         "TabSeparated")

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
