"""One process that holds the embedded ClickHouse and serves its HTTP interface to the others.

Longer than 400 lines on purpose: a request's whole path through the gateway (the strict
HTTP framing, the order of the checks in the diagram below, the server's cap, and the
start-up check that the guard still refuses its probes) reads top to bottom in one file. The
parts that stand alone (auth, request decoding, the SQL guard, connections, spawn) are
already in gateway/; the handler left here works on its server's gate, body budget and
connections, and split from them the framing and cap rules would be spread over files.

chDB allows one process per database directory, so `gpubill worker` and `gpubill audit`
cannot open it side by side. `gpubill clickhouse serve` is that one process: it opens the
database with the usual lock and migrations (`warehouse.connection.open_database`) and answers
the part of ClickHouse's HTTP protocol that clickhouse-connect's HTTP client speaks.

    accept  ─► Connections   (the cap: a newcomer replaces the oldest connection
                              without a finished head; head and body deadlines)  gateway/connections.py
    request ─► BrowserGuard  (no web page: Origin, Sec-Fetch-Site, Host)        gateway/auth.py
            ─► authenticate  (user gpubill or finance, or 401/516 and close)    gateway/auth.py
            ─► body          (strict framing, per-user cap, BodyBudget)         here
            ─► read_statement (URL params, form fields, capped codecs)          gateway/request.py
            ─► SqlGuard      (allow-lists: settings, database, formats; a plain
                              insert of a known table, or ClickHouse's parse)   gateway/sql_guard.py
            ─► Engine.run    (one statement at a time per user, on a fresh chDB handle,
                              under forced limits and readonly; cancelled when
                              its client leaves)                             warehouse/chdb_engine.py
            ─► 200 + X-ClickHouse-Format/-Summary/-Query-Id, or ClickHouse's error text

Credentials: users `gpubill` (reads and writes) and `finance` (read-only, forced); their
passwords come from GPUBILL_GATEWAY_PASSWORD / GPUBILL_GATEWAY_FINANCE_PASSWORD or are
generated on the first start into <GPUBILL_HOME>/clickhouse-gateway.credentials (0600; a
log line says where, never what). `serve` (and `gpubill up`, through `start` and `publish`)
writes the record beside the database by which gpubill's own commands find the gateway and
its DSN (warehouse/served.py, 0600); elsewhere they take the DSN from GPUBILL_CLICKHOUSE,
http://gpubill:PASSWORD@127.0.0.1:8123/ — the same form as for a ClickHouse server; `spawn`
hands its caller that DSN.

What it answers: queries with server-side parameters (`param_*`, in the URL or as
multipart form fields), `database` (the project's only; or X-ClickHouse-Database), settings
as URL parameters (those listed for the user, or listed with a harmless value), listed
output formats (`default_format` or X-ClickHouse-Format, as the JDBC driver asks), inserts whose data follows `INSERT ... FORMAT x`
in the body or the `query` parameter (lz4, zstd, gzip and deflate request bodies), commands
(GET: read only, as in ClickHouse), and `/ping`. What it serves is allowed, not refused:
gateway/allowed.py lists it (the project's tables and views, listed functions, settings,
formats); at start-up `check_guard` makes sure the guard still refuses its probes and lets
the schema's own statement through on the installed chDB. Limits: body size (on the wire and
decompressed), bodies held at once, max_execution_time and max_memory_usage of every
statement, connections (see gateway/connections.py). What it does not: TLS, sessions
(`SET`, `USE` and temporary tables end with their request), external data, ClickHouse's
own block compression of answers (`compress=1`: the answer is gzip-encoded instead, which
the JDBC driver reads; other clients' Accept-Encoding is not honoured). A development and small-site tool: bind it to loopback, as the default does.
`spawn` starts it in its own session (process group); a shell's `serve` runs in the
shell's job, and SYSTEM SHUTDOWN/KILL, which signal the process group, are refused anyway.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from gpubill.config import Settings
from gpubill.devenv.gateway.auth import (
    CREDENTIALS_FILE,
    READER,
    WRITER,
    BrowserGuard,
    Credentials,
    authenticate,
    load_credentials,
)
from gpubill.devenv.gateway.request import (
    LEADING_COMMENTS,
    GatewayError,
    body_too_large,
    decode_body,
    read_statement,
    refusal,
    split_inline_data,
    url_parameters,
)
from gpubill.devenv.gateway.allowed import DDL_STATEMENTS
from gpubill.devenv.gateway.connections import BodyBudget, Connection, Connections
from gpubill.devenv.gateway.spawn import GatewayStartError, SpawnedGateway, spawn
from gpubill.devenv.gateway.sql_guard import Limits, SqlGuard
from gpubill.errors import ConfigError, GpubillError
from warehouse.chdb_engine import TRAILING_FORMAT, Answer, Engine, Statement, StatementFailed
from warehouse import served
from warehouse.connection import Database, normalize_dsn, open_database, redact
from warehouse.errors import DatabaseError

__all__ = ["GatewayError", "GatewayStartError", "RunningGateway", "SpawnedGateway", "bind_for", "decode_body", "parse_listen",
           "publish", "read_statement", "serve", "spawn", "split_inline_data", "start"]

log = logging.getLogger("gpubill.gateway")

IDLE_TIMEOUT_S = 120.0
REPLY_GZIP_LEVEL = 1  # answers to `compress=1`: the fastest level (a BI tool's answers are small)  # a kept-alive connection that sends nothing for this long is closed
LISTEN_BACKLOG = 256  # connections the kernel queues before accept (http.server's default of 5 reset clients)
QUERY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# headers whose second copy could make two readers disagree about the request
SINGLE_HEADERS = frozenset({"authorization", "x-clickhouse-user", "x-clickhouse-key", "host", "origin",
                            "sec-fetch-site", "content-encoding", "content-length", "transfer-encoding",
                            "content-type", "x-clickhouse-format", "x-clickhouse-database", "x-clickhouse-query-id"})
COMMON_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


READER_MAX_BODY_BYTES = 8 << 20  # the read-only user sends queries and their parameters, never data
CONTENT_LENGTH = re.compile(r"^[0-9]{1,15}$")
CHUNK_SIZE = re.compile(rb"^([0-9A-Fa-f]{1,15})(?:;[^\r\n]*)?\r\n$")
READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class Gate:
    """Everything a request is checked against, built once at start-up."""

    credentials: Credentials
    browsers: BrowserGuard
    guard: SqlGuard
    limits: Limits
    max_body_bytes: int

    def statement_for(self, statement: Statement, user: str, *, get: bool) -> tuple[Statement, bool]:
        """The statement with the settings the gateway forces, and whether it needs ClickHouse's
        parser (False only for a plain insert of a known table). Raises GatewayError for what
        it refuses."""
        settings = dict(statement.settings)
        timeout_s = _client_timeout_s(settings.pop("max_execution_time", None), self.limits.max_execution_s)
        self.guard.check_settings(settings, user)
        self.guard.check_database(statement.database)
        readonly = 1 if user == READER else 2 if get else 0  # 2: GET may still change settings, as in ClickHouse
        statement = replace(statement, settings=settings, cancel_marker=f"gpubill-gateway:{uuid.uuid4()}",
                            forced_settings=self.limits.forced_settings(readonly, max_execution_s=timeout_s))
        named = TRAILING_FORMAT.search(statement.sql)
        inserting = INSERT_START.match(statement.sql) is not None
        if named:
            self.guard.check_format(named.group(1), insert=inserting)
        if not inserting:
            self.guard.check_format(statement.default_format, insert=False)
        if self.guard.plain_insert(statement.sql) is not None:
            return statement, False
        self.guard.check_text(statement.sql)
        return statement, True

    def max_body_for(self, user: str) -> int:
        return min(self.max_body_bytes, READER_MAX_BODY_BYTES) if user == READER else self.max_body_bytes


def _client_timeout_s(value: str | None, limit_s: int) -> int | None:
    """A client's max_execution_time (a JDBC query timeout): whole seconds up to the gateway's
    own limit, which it shortens; 0 (none) or more than the limit is refused, as a server's
    constraint would."""
    if value is None:
        return None
    value = value.strip()
    if not (value.isdigit() and len(value) <= 9 and 0 < int(value) <= limit_s):
        raise refusal(452, "SETTING_CONSTRAINT_VIOLATION", f"setting max_execution_time is fixed by the gpubill "
                      f"gateway at {limit_s} s at most (a client may ask for 1 to {limit_s})", 403)
    return int(value)


INSERT_START = re.compile(LEADING_COMMENTS + r"INSERT\b", re.IGNORECASE | re.DOTALL)


class Inspection:
    """The guard's check of one statement on ClickHouse's parse (the engine calls it), and what
    the statement turned out to be: DDL makes the gateway re-read the project's tables."""

    def __init__(self, guard: SqlGuard, user: str) -> None:
        self.guard, self.user = guard, user
        self.kind: str | None = None

    def __call__(self, formatted: str, ast: str) -> None:
        self.kind = self.guard.inspect(formatted, ast, self.user)
        if self.kind in ("DropQuery", "Rename"):  # gone before it runs, for statements checked meanwhile
            self.guard.forget_tables(self.guard.statement_tables(ast))


# ----------------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    """ClickHouse's HTTP interface, as far as clickhouse-connect uses it, framed strictly."""

    protocol_version = "HTTP/1.1"  # keep-alive: clickhouse-connect pools its connections
    server_version = "gpubill-clickhouse-gateway"
    timeout = IDLE_TIMEOUT_S  # a backstop: the sweeper's deadlines are the real ones
    server: GatewayServer
    connection_state: Connection

    def handle(self) -> None:
        try:
            super().handle()
        except OSError:
            pass  # the sweeper or an eviction shut the socket: the connection is over

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        if path == "/ping" or (path == "/" and "query=" not in self.path):
            self._reply(200, b"Ok.\n", {"Content-Type": "text/plain; charset=UTF-8"})
        elif path == "/":
            self._answer(get=True)
        else:
            self._reply(404, b"There is no handle for this path\n", {"Content-Type": "text/plain; charset=UTF-8"})

    def do_POST(self) -> None:  # noqa: N802
        if urlsplit(self.path).path not in ("/", ""):
            self.close_connection = True  # the body stays unread
            self._reply(404, b"There is no handle for this path\n", {"Content-Type": "text/plain; charset=UTF-8"})
            return
        self._answer(get=False)

    def _answer(self, *, get: bool) -> None:
        gate = self.server.gate
        query_id = str(uuid.uuid4())
        self.compress_reply = False
        body_read = get
        held = 0
        started = time.monotonic()
        try:
            headers = self._headers()
            url_params = url_parameters(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
            self.compress_reply = url_params.get("compress") == "1"
            asked_id = url_params.get("query_id") or self.headers.get("X-ClickHouse-Query-Id", "")
            if QUERY_ID.match(asked_id):
                query_id = asked_id  # anything else is replaced: headers never echo client input
            gate.browsers.check(headers)
            try:
                user = authenticate(headers, url_params, gate.credentials)
            except GatewayError:
                self.close_connection = True  # no keep-alive without a password
                raise
            if get:
                body = b""
                if self.headers.get("Content-Length") not in (None, "0") or "transfer-encoding" in headers:
                    raise refusal(36, "BAD_ARGUMENTS", "a GET request has no body", 400)
            else:
                body, held = self._body(gate.max_body_for(user))
            body_read = True
            request = read_statement(url_params, headers, body, max_body_bytes=gate.max_body_for(user))
            held = self._hold(held, len(request.data) + len(request.sql))
            statement, inspect = gate.statement_for(request, user, get=get)
            inspection = Inspection(gate.guard, user) if inspect else None
            engine = self.server.engine
            self.server.connections.running(self.connection_state, lambda: engine.cancel(statement.cancel_marker))
            try:
                answer = engine.run(statement, inspection, lane=user)
            finally:
                if inspection is not None and inspection.kind in DDL_STATEMENTS:
                    gate.guard.set_tables(engine.table_names())
        except (GatewayError, StatementFailed) as exc:
            log.info("statement refused in %.3f s: %s", time.monotonic() - started, str(exc)[:300])
            self.close_connection = self.close_connection or not body_read
            self._reply(exc.status, (str(exc) + "\n").encode(), {
                **self._common(query_id), "X-ClickHouse-Exception-Code": str(exc.code),
                "Content-Type": "text/plain; charset=UTF-8"})
            return
        except Exception as exc:  # noqa: BLE001 - a gateway bug answers as a ClickHouse error, never a hang
            log.exception("gateway failure")
            self.close_connection = True
            message = f"Code: 1002. DB::Exception: gpubill gateway failure: {type(exc).__name__}. (UNKNOWN_EXCEPTION)\n"
            self._reply(500, message.encode(), {**self._common(query_id), "X-ClickHouse-Exception-Code": "1002",
                                                "Content-Type": "text/plain; charset=UTF-8"})
            return
        finally:
            self.server.budget.release(held)
        self._reply(200, answer.body, {**self._common(query_id), **_answer_headers(answer)})

    def _common(self, query_id: str) -> dict[str, str]:
        return {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": self.server.engine.timezone,
                "X-ClickHouse-Server-Display-Name": "gpubill-gateway"}

    def _headers(self) -> dict[str, str]:
        """The request's headers, lower-cased; a header given twice where two readers could
        disagree, or folded over lines (obsolete in HTTP/1.1), is refused."""
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            name = name.lower()
            if "\n" in value or "\r" in value:
                raise refusal(36, "BAD_ARGUMENTS", f"header {name[:64]} is folded over several lines", 400)
            if name in headers and name in SINGLE_HEADERS:
                raise refusal(36, "BAD_ARGUMENTS", f"header {name[:64]} is given twice", 400)
            headers[name] = value
        return headers

    def _hold(self, held: int, n_bytes: int) -> int:
        """Count `n_bytes` more against the body budget (503 when it is spent); the new total held."""
        extra = max(0, n_bytes - held)
        if extra and not self.server.budget.reserve(extra):
            raise _busy("request bodies")
        return held + extra

    def _body(self, max_bytes: int) -> tuple[bytes, int]:
        """The request body and the bytes it holds of the budget. Framed strictly: either
        `Content-Length` (digits only) or `Transfer-Encoding: chunked` (nothing else, never
        both); larger than `max_bytes` is refused before it is held, and a body that stops
        coming is cut off by the sweeper."""
        transfer = self.headers.get("Transfer-Encoding")
        length_text = self.headers.get("Content-Length")
        if transfer is not None and length_text is not None:
            raise refusal(36, "BAD_ARGUMENTS", "a request with both Transfer-Encoding and Content-Length is refused", 400)
        connections, state = self.server.connections, self.connection_state
        connections.reading_body(state)
        held = 0
        try:
            if transfer is not None:
                if transfer.strip().lower() != "chunked":
                    raise refusal(36, "BAD_ARGUMENTS", "Transfer-Encoding other than chunked is not supported", 501)
                chunks, size_so_far = [], 0
                while True:
                    line = self.rfile.readline(1024)
                    match = CHUNK_SIZE.match(line)
                    if not match:
                        raise ValueError("malformed chunk size line")
                    size = int(match.group(1), 16)
                    if size == 0:
                        while True:
                            trailer = self.rfile.readline(1024)
                            if trailer == b"\r\n":
                                return b"".join(chunks), held
                            if not trailer.endswith(b"\n"):
                                raise ValueError("the body ended early")
                    size_so_far += size
                    if size_so_far > max_bytes:
                        raise body_too_large(max_bytes)
                    held = self._hold(held, size_so_far)
                    chunks.append(self._read_exactly(size, size_so_far - size))
                    if self.rfile.read(2) != b"\r\n":
                        raise ValueError("a chunk does not end with CRLF")
            if length_text is None:
                return b"", 0
            if not CONTENT_LENGTH.match(length_text.strip()):
                raise ValueError(f"Content-Length {length_text[:32]!r} is not a number")
            length = int(length_text)
            if length > max_bytes:
                raise body_too_large(max_bytes)
            held = self._hold(held, length)
            return (self._read_exactly(length, 0) if length else b""), held
        except (ValueError, OSError) as exc:
            self.server.budget.release(held)
            self.close_connection = True
            raise refusal(36, "BAD_ARGUMENTS", f"bad request body: {exc}", 400) from None
        except GatewayError:
            self.server.budget.release(held)
            raise

    def _read_exactly(self, size: int, received_before: int) -> bytes:
        parts, got = [], 0
        while got < size:
            part = self.rfile.read(min(READ_CHUNK_BYTES, size - got))
            if not part:
                raise ValueError("the body ended early")
            parts.append(part)
            got += len(part)
            self.server.connections.body_progress(self.connection_state, received_before + got)
        return b"".join(parts)

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        if getattr(self, "compress_reply", False) and body:
            # `compress=1` asks for ClickHouse's own block compression; the JDBC driver reads an
            # answer with a Content-Encoding as that encoding instead (its CompressedEntity),
            # errors included, so gzip, which every HTTP client reads, stands in for it
            body = gzip.compress(body, REPLY_GZIP_LEVEL)
            headers = {**headers, "Content-Encoding": "gzip"}
        self.send_response(status)
        for name, value in {**COMMON_HEADERS, **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.server.connections.idle(self.connection_state)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        # the request line may carry ?password=: log the path only
        log.debug("%s %s %s", self.address_string(), self.command, urlsplit(self.path or "").path)


def _busy(what: str) -> GatewayError:
    return refusal(202, "TOO_MANY_SIMULTANEOUS_QUERIES", f"the gpubill gateway holds its maximum of {what}; "
                   "retry later", 503)


def _answer_headers(answer: Answer) -> dict[str, str]:
    headers = {"X-ClickHouse-Summary": json.dumps(answer.summary), "Content-Type": "application/octet-stream"}
    if answer.result_format:
        headers["X-ClickHouse-Format"] = answer.result_format
    return headers


BUSY_REPLY = (b"Code: 202. DB::Exception: the gpubill gateway serves its maximum of concurrent connections; "
              b"retry later. (TOO_MANY_SIMULTANEOUS_QUERIES)\n")


class GatewayServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them (see gateway/connections.py:
    a newcomer replaces the oldest connection without a finished request; 503 only when all
    are busy); the engine serializes what reaches chDB per user."""

    daemon_threads = True
    block_on_close = False  # idle kept-alive connections must not hold up a stop
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], engine: Engine | None = None, *, max_connections: int = 64,
                 head_timeout_s: float = 10.0, body_min_rate: int = 1 << 20, body_budget_bytes: int = 512 << 20) -> None:
        super().__init__(address, _Handler)
        self.engine = engine
        self.gate: Gate | None = None
        self.connections = Connections(max_connections, head_timeout_s=head_timeout_s, idle_timeout_s=IDLE_TIMEOUT_S,
                                       body_grace_s=head_timeout_s, body_min_rate=body_min_rate)
        self.budget = BodyBudget(body_budget_bytes)

    def process_request(self, request, client_address) -> None:
        state = self.connections.admit(request)
        if state is None:
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=UTF-8\r\n"
                                b"X-ClickHouse-Exception-Code: 202\r\nConnection: close\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(BUSY_REPLY) + BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, (client_address, state))
        except BaseException:
            self.connections.release(state)
            raise

    def process_request_thread(self, request, client_address) -> None:
        address, state = client_address
        try:
            self.finish_request(request, address, state)
        except Exception:  # noqa: BLE001 - as socketserver does: one connection's fault is not the server's
            self.handle_error(request, address)
        finally:
            self.connections.release(state)
            self.shutdown_request(request)

    def finish_request(self, request, client_address, state: Connection | None = None) -> None:
        handler = _Handler.__new__(_Handler)
        handler.connection_state = state
        _Handler.__init__(handler, request, client_address, self)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        self.connections.start()
        try:
            super().serve_forever(poll_interval)
        finally:
            self.connections.stop()


def parse_listen(listen: str) -> tuple[str, int]:
    """'host:port' (or ':port', '[::1]:port') → (host, port); the host defaults to loopback."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen: {listen!r} is not host:port, e.g. 127.0.0.1:8123")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(listen: str, *, max_connections: int = 64, **limits) -> GatewayServer:
    """Bind the listening socket (before the database is opened, so a taken port costs nothing);
    `limits` are GatewayServer's keyword arguments (deadlines, body budget)."""
    host, port = parse_listen(listen)
    try:
        return GatewayServer((host, port), max_connections=max_connections, **limits)
    except OSError as exc:
        reason = "address already in use" if exc.errno == 98 else (exc.strerror or str(exc))
        raise GpubillError(f"cannot listen on {host}:{port}: {reason} (another gateway or ClickHouse server?)") from None


def sql_guard(engine: Engine) -> SqlGuard:
    """The guard, with the engine's own lists of aggregate functions, combinators and engines,
    and the project's tables."""
    database = engine.database

    def names(sql: str) -> set[str]:
        try:
            return {str(row[0]) for row in database.query(sql)}
        except DatabaseError:
            return set()  # an older chDB without this system table: the static lists cover it

    return SqlGuard(database=engine.current_database(), tables=engine.table_names(),
                    aggregates=names("SELECT name FROM system.functions WHERE is_aggregate"),
                    combinators=names("SELECT name FROM system.aggregate_function_combinators"),
                    engines=names("SELECT name FROM system.table_engines"),
                    case_insensitive=names("SELECT name FROM system.functions WHERE case_insensitive"))


# statements the guard must refuse on the installed chDB, each harmless if it ran
GUARD_PROBES = ("SELECT * FROM file('/nonexistent/gpubill-guard-probe')", "SYSTEM FLUSH LOGS",
                "SELECT 1 SETTINGS max_execution_time = 1", "SELECT count() FROM (SELECT * FROM url('http://127.0.0.1:9/'))",
                "SELECT * FROM `/nonexistent/gpubill-guard-probe`", "SELECT count() FROM format(CSV, '1')",
                "SELECT 1 SETTINGS format_avro_schema_registry_url = 'http://127.0.0.1:9/'")
# and one it must let through (the schema's own table)
GUARD_PASSES = "SELECT count() FROM schema_migrations WHERE version > 0"


def check_guard(engine: Engine, guard: SqlGuard) -> None:
    """At start-up: the guard still recognises, in this chDB's EXPLAIN AST and formatQuery,
    what it must refuse and what the product needs; its allow-lists hold no function that
    reaches files or the network. Raises GpubillError (the gateway does not start) when not."""
    from gpubill.devenv.gateway import allowed

    leaks = (allowed.SCALAR_FUNCTIONS | allowed.TABLE_FUNCTIONS | guard.aggregates) & allowed.IO_TABLE_FUNCTIONS
    leaks -= {"format"} - allowed.TABLE_FUNCTIONS  # format() as a scalar formats a string
    if leaks:
        raise GpubillError(f"the gateway's allow-lists hold functions that reach files or the network: {sorted(leaks)}")
    for sql in GUARD_PROBES:
        try:
            engine.run(Statement(sql=sql), Inspection(guard, WRITER))
        except GatewayError:
            continue
        except StatementFailed as exc:
            raise GpubillError(f"the gateway's SQL guard does not fit chDB {engine.version}: {sql!r} reached "
                               f"the engine ({str(exc)[:200]})") from None
        raise GpubillError(f"the gateway's SQL guard does not fit chDB {engine.version}: {sql!r} ran")
    try:
        engine.run(Statement(sql=GUARD_PASSES), Inspection(guard, READER))
    except (GatewayError, StatementFailed) as exc:
        raise GpubillError(f"the gateway's SQL guard does not fit chDB {engine.version}: it refuses the product's "
                           f"own {GUARD_PASSES!r} ({str(exc)[:200]})") from None
    log.info("SQL guard checked against chDB %s (%d probes refused, the schema's tables read; %d tables served)",
             engine.version, len(GUARD_PROBES), len(guard.tables))


def bind_for(settings: Settings, listen: str) -> GatewayServer:
    """`bind` with the limits of `settings` (GPUBILL_GATEWAY_*)."""
    return bind(listen, max_connections=settings.gateway_max_connections,
                head_timeout_s=settings.gateway_head_timeout_s, body_min_rate=settings.gateway_body_min_rate_kb << 10,
                body_budget_bytes=settings.gateway_body_budget_mb << 20)


@dataclass
class RunningGateway:
    """A gateway serving in a thread of this process (`start`); `stop` ends it and closes its database."""

    server: GatewayServer
    thread: threading.Thread
    credentials: Credentials
    created: Path | None  # the credentials file when this start generated it (the passwords are there, 0600)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"

    def dsn(self, user: str = WRITER) -> str:
        """The DSN of `user`, password included (never log it: `redact`)."""
        return self.credentials.dsn(*self.address, user)

    def stop(self) -> None:
        """Refuse new connections, finish the statements in flight, close the database."""
        self.server.shutdown()
        self.server.server_close()
        self.server.engine.close()


def gateway_credentials(settings: Settings) -> tuple[Credentials, Path | None]:
    """The users' passwords: settings', else the credentials file's (generated 0600 on the first
    start, never logged); and the file's path when this call generated it."""
    return load_credentials(settings.home_path, {
        WRITER: _secret(settings.gateway_password), READER: _secret(settings.gateway_finance_password)})


def start(settings: Settings, server: GatewayServer, database: Database,
          credentials: tuple[Credentials, Path | None] | None = None) -> RunningGateway:
    """Serve `database` (an embedded one this process holds) on the bound `server` from a thread,
    with `credentials` (default `gateway_credentials(settings)`). Raises GpubillError when the
    guard does not fit the installed chDB; on any failure the socket is closed and `database`
    left open for its owner."""
    try:
        credentials, created = credentials or gateway_credentials(settings)
        limits = Limits(max_execution_s=settings.gateway_max_execution_s,
                        max_memory_bytes=settings.gateway_max_memory_mb << 20)
        server.engine = Engine(database, lock_wait_s=float(settings.gateway_max_execution_s))
        host, port = server.server_address[:2]
        server.gate = Gate(credentials, BrowserGuard(host, port), sql_guard(server.engine), limits,
                           settings.gateway_max_body_mb << 20)
        check_guard(server.engine, server.gate.guard)
    except BaseException:
        server.server_close()
        raise
    if host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("listening on %s: reachable from the network, without TLS (passwords travel in clear)", host)
    thread = threading.Thread(target=server.serve_forever, name="gateway", daemon=True)
    thread.start()
    if created is not None:  # the passwords stay in the file: a log line is no place for them
        log.info("generated the gateway's passwords into %s (mode 0600)", created)
    return RunningGateway(server, thread, credentials, created)


def publish(gateway: RunningGateway | None, database_dsn: str, command: str) -> Path:
    """Write the record by which every gpubill command finds the database `database_dsn`
    (chdb://…) and goes through `gateway` (None: held, not served) — warehouse/served.py."""
    path = Path(normalize_dsn(database_dsn)[len("chdb://"):])
    return served.publish(path, served.Served(
        pid=os.getpid(), command=command, database=str(path),
        dsn=gateway.dsn(WRITER) if gateway else "", finance_dsn=gateway.dsn(READER) if gateway else "",
        started=datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")))


def serve(settings: Settings, listen: str, *, announce: Callable[[str], None] = log.warning,
          stop: threading.Event | None = None) -> None:
    """Serve the embedded database of `settings` on `listen` until SIGTERM/SIGINT (or `stop` is set).

    A stop finishes the statement in flight, refuses later ones and closes the database.
    """
    dsn = normalize_dsn(settings.clickhouse)
    if not dsn.startswith("chdb:"):
        raise ConfigError(f"GPUBILL_CLICKHOUSE: the gateway serves an embedded database (chdb:///path), not {redact(dsn)}")
    path = Path(dsn[len("chdb://"):])
    _held, record, _ignored = served.current(path)
    if record is not None and record.serving:
        raise GpubillError(f"{record.command or 'pid ' + str(record.pid)} (pid {record.pid}) already serves {path} "
                           f"on {redact(record.dsn)}; every gpubill command finds it by itself (`gpubill status`)")
    server = bind_for(settings, listen)
    try:
        credentials = gateway_credentials(settings)
        database = open_database(dsn, follow=False)
    except BaseException:
        server.server_close()
        raise
    try:
        gateway = start(settings, server, database, credentials)
    except BaseException:
        database.close()
        raise
    stop = stop or _stop_on_signals()
    try:
        record_file = publish(gateway, dsn, "gpubill clickhouse serve")
        if settings.gateway_password and settings.gateway_finance_password:
            where = "from settings"
        else:
            where = f"in {settings.home_path / CREDENTIALS_FILE}"
        announce(f"serving {dsn} as ClickHouse HTTP on {gateway.url} to users gpubill (read-write) and finance "
                 f"(read-only), passwords {where}; gpubill commands with this GPUBILL_CLICKHOUSE find it by "
                 f"themselves ({record_file}); a finance tool's URL: `gpubill status --finance-url`")
        while not stop.wait(0.5):  # a timed wait lets the signal handlers run promptly
            pass
    finally:
        served.withdraw(path, os.getpid())
        gateway.stop()
        log.warning("gateway stopped; database closed")


def _secret(value) -> str | None:
    return value.get_secret_value() if value is not None else None


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
