"""The one seam to ClickHouse: open a client from a DSN, migrate, and hold the chDB lock.

The same code serves the embedded engine (`chdb:///abs/path`, the default under ./var/)
and a server (`http://user:pass@host:8123/db`). chDB allows one process per directory and
fails with an unhelpful message when a second one tries, so before opening it we take an
advisory lock of our own beside it and write our pid and command there. When the process
holding it serves it (`gpubill up`, `gpubill clickhouse serve`: the record beside it,
warehouse/served.py), a second process goes through that server instead, with no setting;
when it does not, the second process is told which process holds the database and what to do.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlsplit

import clickhouse_connect
from clickhouse_connect.driver.exceptions import ClickHouseError, DataError, ProgrammingError

from warehouse import migrations, served
from warehouse.cluster import check_cluster_name
from warehouse.errors import (ENOSPC_TEXTS, NOT_ENOUGH_SPACE, PERMANENT_CODES, DatabaseBusy, DatabaseError, DiskFull,
                              DsnInvalid, SchemaNotReady, StatementRefused)


def normalize_dsn(dsn: str) -> str:
    """Make a chDB DSN absolute (chdb:///abs/path); check the scheme of any other DSN."""
    scheme = dsn.split(":", 1)[0].lower()
    if scheme == "chdb":
        rest = dsn[len("chdb:") :]
        rest = rest[2:] if rest.startswith("//") else rest
        if not rest:
            raise DsnInvalid("GPUBILL_CLICKHOUSE: a chDB DSN needs a directory, e.g. chdb:///srv/gpubill/clickhouse")
        return f"chdb://{Path(rest).expanduser().resolve()}"
    if scheme in ("http", "https", "clickhouse", "clickhouses"):
        parts = urlsplit(dsn)
        if not parts.hostname:
            raise DsnInvalid(f"GPUBILL_CLICKHOUSE: {redact(dsn)} names no host")
        return dsn
    raise DsnInvalid(
        f"GPUBILL_CLICKHOUSE: unsupported DSN {redact(dsn)!r}; use chdb:///path/to/dir or http://user:pass@host:8123/db"
    )


def redact(dsn: str) -> str:
    """The DSN with its password replaced by ***, for messages and logs."""
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", dsn)


class Turns:
    """The statements of one client, one at a time, the pipeline's before a background job's.

    A `Database` is shared by threads of one process (`gpubill up`: the writer, the rating
    thread's look-ups, the scheduler's jobs, the API; chDB allows one engine per process) and
    its client takes one statement at a time — chDB's under a lock of its own, an HTTP
    client's session refuses a second. That lock is not fair: a thread that ends a statement
    and starts the next at once (a rollup, statement after statement) takes it back before a
    waiting writer wakes up, for many statements in a row.

    So a thread that runs long jobs marks itself (`yielding()`: the scheduler's job thread,
    billing/scheduler.py): before each of its statements it waits while any other thread's
    statement is waiting, for at most YIELD_MAX_S (a job is delayed, never starved). The
    writer therefore waits for at most the one job statement in progress. Among the other
    threads nothing changes: they take the lock as they did before (a strict first-come
    order among them cost the worker's freshness: `gpubill bench pipeline` p50 0.2 s → 0.4 s,
    the writer's inserts of one batch interleaved with the rating thread's look-ups)."""

    YIELD_MAX_S = 1.0

    def __init__(self) -> None:
        self._statement = threading.Lock()
        self._changed = threading.Condition(threading.Lock())
        self._waiting = 0  # statements of non-yielding threads waiting for the lock
        self._local = threading.local()

    @contextmanager
    def yielding(self):
        """Within it, this thread's statements let every waiting statement of another thread go first."""
        before = getattr(self._local, "yielding", False)
        self._local.yielding = True
        try:
            yield
        finally:
            self._local.yielding = before

    def __enter__(self) -> None:
        if getattr(self._local, "yielding", False):
            deadline = time.monotonic() + self.YIELD_MAX_S
            with self._changed:
                while self._waiting and (left := deadline - time.monotonic()) > 0:
                    self._changed.wait(left)
            self._statement.acquire()
            return
        with self._changed:
            self._waiting += 1
        try:
            self._statement.acquire()
        finally:
            with self._changed:
                self._waiting -= 1
                if not self._waiting:
                    self._changed.notify_all()

    def __exit__(self, *exc: object) -> None:
        self._statement.release()


@dataclass
class Database:
    """An open ClickHouse client plus, for chDB, the lock that keeps other processes out.
    Its statements go one at a time, whichever thread sends them; a thread inside
    `yielding()` lets the others' go first (`Turns`). `cluster`: the ClickHouse cluster whose
    schema it reads and writes (GPUBILL_CLICKHOUSE_CLUSTER; empty: a single server) — the
    application's mutations name their table through `warehouse.cluster.mutation_target`."""

    dsn: str
    client: Any
    cluster: str = ""
    _lock_fd: int | None = field(default=None, repr=False)
    _turns: Turns = field(default_factory=Turns, repr=False, compare=False)

    @property
    def embedded(self) -> bool:
        return self.dsn.startswith("chdb:")

    @property
    def location(self) -> str:
        """Where the data lies, for messages: the embedded database's directory, else the DSN
        (its password replaced)."""
        return self.dsn[len("chdb://"):] if self.embedded else redact(self.dsn)

    def command(self, sql: str, parameters: dict | None = None, settings: dict | None = None) -> Any:
        """Run a statement. An INSERT … SELECT (re-rating, regeneration, migrations) is never
        deduplicated (`insert_settings(None)`): rows deleted and written again identically — a
        correction undone — must be stored, whatever the table's window of recent inserts."""
        if sql.lstrip()[:6].upper() == "INSERT":
            settings = {**insert_settings(None), **(settings or {})}
        try:
            with self._turns:
                return self.client.command(sql, parameters=parameters, settings=settings)
        except ClickHouseError as exc:
            raise refused(exc, f"ClickHouse refused a statement: {_first_line(exc)}", where=self.location) from exc

    def query(self, sql: str, parameters: dict | None = None) -> list[tuple]:
        try:
            with self._turns:
                return self.client.query(sql, parameters=parameters).result_rows
        except ClickHouseError as exc:
            raise refused(exc, f"ClickHouse refused a query: {_first_line(exc)}", where=self.location) from exc

    def query_dicts(self, sql: str, parameters: dict | None = None) -> list[dict]:
        try:
            with self._turns:
                result = self.client.query(sql, parameters=parameters)
        except ClickHouseError as exc:
            raise refused(exc, f"ClickHouse refused a query: {_first_line(exc)}", where=self.location) from exc
        names = result.column_names
        return [dict(zip(names, row)) for row in result.result_rows]

    def query_bytes(self, sql: str, parameters: dict | None = None, fmt: str = "Parquet") -> bytes:
        """The result of a query as the bytes of one file in ClickHouse format `fmt` (Parquet, CSV …).
        The whole result is held in memory: callers bound it (reports/archive.py: one hour of a table)."""
        try:
            with self._turns:
                return self.client.raw_query(sql, parameters=parameters, fmt=fmt)
        except ClickHouseError as exc:
            raise refused(exc, f"ClickHouse refused a query: {_first_line(exc)}", where=self.location) from exc

    def insert(self, table: str, rows: Sequence[Sequence[Any]], columns: Sequence[str], *,
               token: str | None = None) -> None:
        """Insert rows; raises DatabaseError when ClickHouse does not acknowledge them. With a
        `token`, an insert that repeats one of the table's last inserts with the same token is
        stored once (`insert_settings`); without one, every insert is stored."""
        if not rows:
            return
        _failpoint("clickhouse-down", "ClickHouse unavailable (failpoint clickhouse-down)")
        try:
            with self._turns:
                self.client.insert(table, rows, column_names=list(columns), settings=insert_settings(token))
        except ClickHouseError as exc:
            raise refused(exc, f"ClickHouse refused an insert into {table}: {_first_line(exc)}", where=self.location) from exc

    def insert_native(self, table: str, columns: Sequence[str], block: bytes, *, token: str | None = None) -> None:
        """Insert one ready-made block in ClickHouse's Native format (see warehouse/native_format.py);
        `token` as for `insert`."""
        _failpoint("clickhouse-down", "ClickHouse unavailable (failpoint clickhouse-down)")
        _slowpoint("clickhouse-slow")
        try:
            # optimize_on_insert=0: a ReplacingMergeTree need not collapse an inserted block
            # (merges and FINAL do, and the pipeline's blocks hold one row per key anyway):
            # a sixth of the insert's CPU.
            with self._turns:
                self.client.raw_insert(table, list(columns), block, fmt="Native",
                                       settings={"optimize_on_insert": 0, **insert_settings(token)})
        except ClickHouseError as exc:
            raise refused(exc, f"ClickHouse refused an insert into {table}: {_first_line(exc)}", where=self.location) from exc

    def migrate(self) -> list[str]:
        """Apply the shipped migrations not yet recorded, in this database's form (ON CLUSTER
        `cluster` when it has one); idempotent. Returns the names applied."""
        if self.cluster:
            return migrations.apply_cluster(self, self.cluster)
        return migrations.apply(self)

    def yielding(self):
        """A context in which this thread's statements let other threads' go first (`Turns`):
        for long jobs beside the pipeline."""
        return self._turns.yielding()

    def close(self) -> None:
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing must not mask the real outcome
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# What decides how ClickHouse cuts one insert into blocks (each block deduplicated under the
# token with _0, _1 … appended): pinned at ClickHouse's defaults on every tokened insert, so that a
# retry is cut exactly as its first attempt was, whatever a server's profile says meanwhile.
BLOCKING = {"max_insert_block_size": 1_048_449, "min_insert_block_size_rows": 1_048_449,
            "min_insert_block_size_bytes": 268_402_944}


def insert_settings(token: str | None) -> dict[str, Any]:
    """The settings of a data insert. With a token: deduplicated by it (the tables that keep a
    window of recent inserts — migration 0031 — store a repeat of one of them once; `BLOCKING`
    pinned). Without: not deduplicated at all — on such a table ClickHouse would otherwise drop
    any insert whose bytes equal a recent one's, even one re-inserting rows deleted since (a
    correction undone): the default is off, and only a writer that names what it inserts turns it on.

    Off is said twice: insert_deduplicate = 0 (a server takes it from the request), and a token
    never used before — chDB 26.9 ignores insert_deduplicate in an INSERT's own SETTINGS clause,
    where its backend puts it, but honours the token (tests/unit/test_sink_dedup.py)."""
    if token is None:
        return {"insert_deduplicate": 0, "insert_deduplication_token": f"once:{uuid.uuid4().hex}"}
    return {"insert_deduplicate": 1, "insert_deduplication_token": token, **BLOCKING}


def open_database(dsn: str, *, migrate: bool = True, follow: bool = True, wait_s: float | None = None,
                  cluster: str | None = None) -> Database:
    """Open ClickHouse at `dsn` and bring its schema up to date.

    An embedded database held by a process that serves it (its record, warehouse/served.py)
    is opened through that server (`follow`; the returned Database's dsn is the server's);
    one held by a process that does not is waited for `wait_s` (default `lock_wait_s()`).

    `cluster` (default: GPUBILL_CLICKHOUSE_CLUSTER, `cluster_setting()`; empty: a single server)
    names the ClickHouse cluster the server belongs to. Then nothing is migrated here: a pending
    migration applied in its single-server form would create a plain table where the cluster
    needs a replicated one; SchemaNotReady says how many are pending and to run `gpubill db
    migrate --cluster` first. Without one, a server whose schema is a cluster's (schema_migrations replicated)
    is refused the same way (`check_schema_form`). `migrate=False` skips the migrations, never
    that check.

    Raises DatabaseBusy when another process holds the embedded database, DatabaseError
    when the server cannot be reached or refuses us, DsnInvalid for a malformed DSN,
    SchemaNotReady (above), ClusterSchemaError for a cluster name that is no identifier.
    """
    dsn = normalize_dsn(dsn)
    cluster = cluster_setting() if cluster is None else cluster.strip()
    if cluster:
        check_cluster_name(cluster)
        if dsn.startswith("chdb:"):
            raise DsnInvalid(f"GPUBILL_CLICKHOUSE_CLUSTER={cluster}: the embedded database (chDB) has no cluster; "
                             "point GPUBILL_CLICKHOUSE at one of the cluster's servers "
                             "(http://user:pass@host:8123/gpubill), or unset GPUBILL_CLICKHOUSE_CLUSTER")
    embedded = dsn.startswith("chdb:")  # also when opened through the process serving it (no cluster there)
    lock_fd = None
    if dsn.startswith("chdb:"):
        path = Path(dsn[len("chdb://") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        lock_fd, through = _lock_embedded(path, follow=follow, wait_s=lock_wait_s() if wait_s is None else wait_s)
        if through is not None:
            dsn = through
    try:
        client = clickhouse_connect.get_client(dsn=dsn, **({} if lock_fd is not None else {"connect_timeout": 5}))
        database = Database(dsn=dsn, client=client, cluster=cluster, _lock_fd=lock_fd)
        database.command("SELECT 1")
    except ClickHouseError as exc:
        if lock_fd is not None:
            os.close(lock_fd)
        where = dsn[len("chdb://"):] if dsn.startswith("chdb:") else redact(dsn)
        raise refused(exc, f"cannot open ClickHouse at {redact(dsn)}: {_first_line(exc)}", where=where) from exc
    except BaseException:
        if lock_fd is not None:
            os.close(lock_fd)
        raise
    try:
        if not embedded:
            check_schema_form(database)
        if migrate and cluster:
            check_nothing_pending(database)
        elif migrate:
            database.migrate()
    except BaseException:
        database.close()
        raise
    return database


def cluster_setting() -> str:
    """GPUBILL_CLICKHOUSE_CLUSTER, stripped: the ClickHouse cluster of the server (empty: none)."""
    return os.environ.get("GPUBILL_CLICKHOUSE_CLUSTER", "").strip()


def check_schema_form(database: Database) -> None:
    """Refuse (SchemaNotReady) a server whose schema is a cluster's while `database.cluster` is
    empty, or a single server's while it is set: the form shows in schema_migrations' engine
    (Replicated… on a cluster, warehouse/cluster.py). No schema yet fits either."""
    rows = database.query("SELECT engine FROM system.tables WHERE database = currentDatabase() "
                          "AND name = 'schema_migrations'")
    if not rows:
        return
    engine = str(rows[0][0])
    replicated = engine.startswith("Replicated")
    if replicated and not database.cluster:
        raise SchemaNotReady(f"the schema at {redact(database.dsn)} is a ClickHouse cluster's (schema_migrations is "
                             f"{engine}): set GPUBILL_CLICKHOUSE_CLUSTER to the cluster's name (the one given to "
                             "`gpubill db migrate --cluster`) for every gpubill process")
    if database.cluster and not replicated:
        raise SchemaNotReady(f"GPUBILL_CLICKHOUSE_CLUSTER={database.cluster}, but the schema at {redact(database.dsn)} "
                             f"is a single server's (schema_migrations is {engine}): unset GPUBILL_CLICKHOUSE_CLUSTER, "
                             "or point GPUBILL_CLICKHOUSE at a server of that cluster")


def check_nothing_pending(database: Database) -> None:
    """Refuse (SchemaNotReady) a cluster's database with migrations pending: they are applied
    ON CLUSTER by `gpubill db migrate --cluster NAME` alone, never by a process at its start."""
    waiting = migrations.pending(database)
    if waiting:
        count = f"{len(waiting)} migration{'s are' if len(waiting) != 1 else ' is'}"
        raise SchemaNotReady(f"{count} pending on the cluster {database.cluster}: run "
                             f"`gpubill db migrate --cluster {database.cluster}` first")


LOCK_WAIT_S = 5.0  # how long a command waits for the embedded database (GPUBILL_DB_LOCK_WAIT_S)
_LOCK_POLL_S = 0.1


def lock_wait_s() -> float:
    """GPUBILL_DB_LOCK_WAIT_S (seconds ≥ 0), else LOCK_WAIT_S: a command that finds the embedded
    database held waits this long for it (another short command finishing) before it says so."""
    try:
        return max(0.0, float(os.environ.get("GPUBILL_DB_LOCK_WAIT_S", LOCK_WAIT_S)))
    except ValueError:
        return LOCK_WAIT_S


def _lock_embedded(path: Path, *, follow: bool, wait_s: float) -> tuple[int | None, str | None]:
    """(the lock's descriptor, None) once this process holds `path`; (None, the server's DSN)
    when the holder serves it and `follow`. Polls for `wait_s`, then DatabaseBusy."""
    lock_path = served.lock_path(path)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    ignored = ""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            holder_text = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
            held = served.parse_holder(holder_text)
            if follow and held is not None:
                try:
                    record = served.read_record(path, held.pid)
                except FileNotFoundError:
                    pass
                except (served.Ignored, OSError) as exc:
                    ignored = f"; its record was ignored: {exc}"
                else:
                    if record.serving:
                        os.close(fd)
                        return None, record.dsn
            if time.monotonic() >= deadline:
                os.close(fd)
                raise DatabaseBusy(
                    f"the embedded database {path} is in use by {holder_text or 'another process'} (waited "
                    f"{wait_s:g} s), which does not serve it to other commands{ignored}; stop that process, or hold "
                    "the database in one that serves it — `gpubill up` (GPUBILL_GATEWAY_PORT not 0) or `gpubill "
                    "clickhouse serve` — and every command finds it, or point GPUBILL_CLICKHOUSE at a ClickHouse "
                    "server (http://user:pass@host:8123/db)"
                ) from None
            time.sleep(_LOCK_POLL_S)
    os.ftruncate(fd, 0)
    command = " ".join([_program_name(), *sys.argv[1:]])
    os.pwrite(fd, f"pid {os.getpid()} ({command})".encode(), 0)
    return fd, None


def _program_name() -> str:
    """`gpubill` for the installed script and for `python -m gpubill.cli` alike (the lock's
    text names the holder to people and to warehouse/served.py)."""
    name = Path(sys.argv[0]).name
    orig = getattr(sys, "orig_argv", [])
    if name == "__main__.py" and "-m" in orig[:-1]:
        return orig[orig.index("-m") + 1].split(".")[0]
    return name


def _failpoint(name: str, message: str) -> None:
    """Fault injection for the fault tests: while the file $GPUBILL_FAILPOINTS/<name> exists,
    the operation fails as the real fault would. Unset in production: costs one getenv."""
    directory = os.environ.get("GPUBILL_FAILPOINTS")
    if directory and os.path.exists(os.path.join(directory, name)):
        raise DatabaseError(message)


def _slowpoint(name: str) -> None:
    """Fault injection: while $GPUBILL_FAILPOINTS/<name> exists, the operation first sleeps
    the seconds written in it (a slow ClickHouse, so that tests see batches in flight)."""
    directory = os.environ.get("GPUBILL_FAILPOINTS")
    if directory:
        try:
            delay_s = float(Path(directory, name).read_text() or 0)
        except (OSError, ValueError):
            return
        time.sleep(delay_s)


def refused(exc: BaseException, message: str, *, where: str = "") -> DatabaseError:
    """The warehouse's error for a ClickHouse client error: DiskFull when the database's disk is
    full (`is_disk_full`; its path: the file ClickHouse's message names, else `where` — the
    database's directory or DSN), StatementRefused when no retry can pass it (`is_permanent`),
    else a DatabaseError that a retry may pass. Each carries ClickHouse's error code (None when
    it gave none)."""
    code = error_code(exc)
    if is_disk_full(exc):
        path = _named_path(exc) or where or "the ClickHouse server's disk"
        return DiskFull(f"{message}; no space left on {path}: free space there (or give the database a larger "
                        "disk), then run the command again", code=code, path=path, detail=message)
    return (StatementRefused if is_permanent(exc) else DatabaseError)(message, code=code)


def is_disk_full(exc: BaseException) -> bool:
    """Whether ClickHouse failed for want of disk space: NOT_ENOUGH_SPACE (243: chDB 26.x's and a
    server's answer when a part's space cannot be reserved — tests/unit/test_sink_dedup.py's full
    tmpfs), or an ENOSPC that a write itself met (under whichever code ClickHouse wrapped it)."""
    if error_code(exc) == NOT_ENOUGH_SPACE:
        return True
    text = str(exc)
    return any(marker in text for marker in ENOSPC_TEXTS)


def _named_path(exc: BaseException) -> str:
    """The file or directory a disk-full message names ("Cannot write to file /var/lib/…: "), or ''."""
    match = re.search(r"(?:file|path|directory|disk) ['`]?(/[^\s'`,:]+)", str(exc))
    return match.group(1) if match else ""


def is_permanent(exc: BaseException) -> bool:
    """Whether retrying the statement cannot help. With a ClickHouse error code: the code is one
    of PERMANENT_CODES. Without one, either ClickHouse never answered (connection refused, timed
    out: transient) or the client refused the statement before sending it (ProgrammingError: an
    unknown column, a bad setting; DataError: a value its column's type cannot hold: permanent)
    — except a session busy with another thread's statement, which the next attempt finds free."""
    code = error_code(exc)
    if code is not None:
        return code in PERMANENT_CODES
    return isinstance(exc, (ProgrammingError, DataError)) and "concurrent queries" not in str(exc)


def error_code(exc: BaseException) -> int | None:
    """ClickHouse's numeric error code of a client error: clickhouse-connect's `code` (1.12 and
    later, both backends), else the "Code: N." its message starts with."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    match = re.search(r"\bCode:\s*(\d+)", str(exc))
    return int(match.group(1)) if match else None


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    for marker, plain in (("Connection refused", "connection refused"), ("Name or service not known", "host not found"),
                          ("timed out", "timed out"), ("Authentication failed", "authentication failed")):
        if marker in text:
            return plain
    return text[:300]
