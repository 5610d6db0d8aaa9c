"""One process that holds the embedded ClickHouse and serves its HTTP interface to the others.

chDB allows one process per database directory, so `gpubill worker` and `gpubill audit`
cannot open it side by side. `gpubill clickhouse serve` is that one process: it opens the
database with the usual lock and migrations (`warehouse.connection.open_database`) and answers
the part of ClickHouse's HTTP protocol that clickhouse-connect's HTTP client speaks.

    request ─► BrowserGuard  (no web page: Origin, Sec-Fetch-Site, Host)        gateway/auth.py
            ─► authenticate  (user gpubill or finance, or 401/516)              gateway/auth.py
            ─► read_statement (URL params, form fields, capped body and codecs) gateway/request.py
            ─► SqlGuard      (settings; plain insert, or ClickHouse's parser)   gateway/sql_guard.py
            ─► Engine.run    (one request at a time, on a fresh chDB handle, under forced
                              limits and readonly)                           warehouse/chdb_engine.py
            ─► 200 + X-ClickHouse-Format/-Summary/-Query-Id, or ClickHouse's error text

Credentials: users `gpubill` (reads and writes) and `finance` (read-only, forced); their
passwords come from GPUBILL_GATEWAY_PASSWORD / GPUBILL_GATEWAY_FINANCE_PASSWORD or are
generated on the first start into <GPUBILL_HOME>/clickhouse-gateway.credentials (0600) and
printed once. gpubill's own commands find them in their DSN, nowhere else:
GPUBILL_CLICKHOUSE=http://gpubill:PASSWORD@127.0.0.1:8123/ — the same form as for a
ClickHouse server; `spawn` hands its caller that DSN.

What it answers: queries with server-side parameters (`param_*`, in the URL or as
multipart form fields), `database`, settings as URL parameters (not the ones the gateway
fixes), any output format, inserts whose data follows `INSERT ... FORMAT x` in the body or
the `query` parameter (lz4, zstd, gzip and deflate request bodies), commands (GET: read
only, as in ClickHouse), and `/ping`. What it refuses for every user: see
gateway/sql_guard.py (SYSTEM, files, network, external engines and dictionaries; at
start-up `check_guard` makes sure it still refuses them on the installed chDB). Limits:
body size (on the wire and decompressed), max_execution_time and max_memory_usage of every
statement, concurrent connections (over the cap: 503). What it does not: TLS, sessions
(`SET`, `USE` and temporary tables end with their request), external data, response
compression. A development and small-site tool: bind it to loopback, as the default does.
`spawn` starts it in its own session (process group); a shell's `serve` runs in the
shell's job, and SYSTEM SHUTDOWN/KILL, which signal the process group, are refused anyway.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    GatewayError,
    body_too_large,
    decode_body,
    read_statement,
    refusal,
    split_inline_data,
    url_parameters,
)
from gpubill.devenv.gateway.spawn import GatewayStartError, SpawnedGateway, spawn
from gpubill.devenv.gateway.sql_guard import Limits, SqlGuard
from gpubill.errors import ConfigError, GpubillError
from warehouse.chdb_engine import Answer, Engine, Statement, StatementFailed
from warehouse.connection import normalize_dsn, open_database, redact
from warehouse.errors import DatabaseError

__all__ = ["GatewayError", "GatewayStartError", "SpawnedGateway", "decode_body", "parse_listen", "read_statement", "serve", "spawn",
           "split_inline_data"]

log = logging.getLogger("gpubill.gateway")

IDLE_TIMEOUT_S = 120.0  # a kept-alive connection that sends nothing for this long is closed
LISTEN_BACKLOG = 256  # connections the kernel queues before accept (http.server's default of 5 reset clients)
QUERY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
# headers whose second copy could make two readers disagree about the request
SINGLE_HEADERS = frozenset({"authorization", "x-clickhouse-user", "x-clickhouse-key", "host", "origin",
                            "sec-fetch-site", "content-encoding", "content-length", "transfer-encoding",
                            "content-type"})
COMMON_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}


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
        parser (False only for a plain insert). Raises GatewayError for what it refuses."""
        self.guard.check_settings(statement.settings)
        readonly = 1 if user == READER else 2 if get else 0  # 2: GET may still change settings, as in ClickHouse
        statement = replace(statement, forced_settings=self.limits.forced_settings(readonly))
        if self.guard.is_plain_insert(statement.sql):
            return statement, False
        self.guard.check_text(statement.sql)
        return statement, True


# ----------------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    """ClickHouse's HTTP interface, as far as clickhouse-connect uses it."""

    protocol_version = "HTTP/1.1"  # keep-alive: clickhouse-connect pools its connections
    server_version = "gpubill-clickhouse-gateway"
    timeout = IDLE_TIMEOUT_S
    server: GatewayServer

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
        body_read = get
        started = time.monotonic()
        try:
            headers = self._headers()
            url_params = url_parameters(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
            if QUERY_ID.match(url_params.get("query_id", "")):
                query_id = url_params["query_id"]  # anything else is replaced: headers never echo client input
            gate.browsers.check(headers)
            user = authenticate(headers, url_params, gate.credentials)
            body = b"" if get else self._body(gate.max_body_bytes)
            body_read = True
            statement, inspect = gate.statement_for(
                read_statement(url_params, headers, body, max_body_bytes=gate.max_body_bytes), user, get=get)
            answer = self.server.engine.run(statement, gate.guard.inspect if inspect else None)
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
        self._reply(200, answer.body, {**self._common(query_id), **_answer_headers(answer)})

    def _common(self, query_id: str) -> dict[str, str]:
        return {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": self.server.engine.timezone,
                "X-ClickHouse-Server-Display-Name": "gpubill-gateway"}

    def _headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for name, value in self.headers.items():
            name = name.lower()
            if name in headers and name in SINGLE_HEADERS:
                raise refusal(36, "BAD_ARGUMENTS", f"header {name} is given twice", 400)
            headers[name] = value
        return headers

    def _body(self, max_bytes: int) -> bytes:
        """The request body, sent with a Content-Length or chunked (clickhouse-connect streams
        inserts chunked); larger than `max_bytes` is refused before it is held."""
        try:
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                chunks, size_so_far = [], 0
                while True:
                    size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
                    if size < 0:
                        raise ValueError("negative chunk size")
                    if size == 0:
                        while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return b"".join(chunks)
                    size_so_far += size
                    if size_so_far > max_bytes:
                        raise body_too_large(max_bytes)
                    chunk = self.rfile.read(size)
                    if len(chunk) != size:
                        raise ValueError("the body ended early")
                    chunks.append(chunk)
                    self.rfile.readline(1024)
            length = int(self.headers.get("Content-Length") or 0)
            if length < 0:
                raise ValueError("negative Content-Length")
            if length > max_bytes:
                raise body_too_large(max_bytes)
            body = self.rfile.read(length) if length else b""
            if len(body) != length:
                raise ValueError("the body ended early")
            return body
        except (ValueError, OSError) as exc:
            raise refusal(36, "BAD_ARGUMENTS", f"bad request body: {exc}", 400) from None

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in {**COMMON_HEADERS, **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        # the request line may carry ?password=: log the path only
        log.debug("%s %s %s", self.address_string(), self.command, urlsplit(self.path or "").path)


def _answer_headers(answer: Answer) -> dict[str, str]:
    headers = {"X-ClickHouse-Summary": json.dumps(answer.summary), "Content-Type": "application/octet-stream"}
    if answer.result_format:
        headers["X-ClickHouse-Format"] = answer.result_format
    return headers


BUSY_REPLY = (b"Code: 202. DB::Exception: the gpubill gateway serves its maximum of concurrent connections; "
              b"retry later. (TOO_MANY_SIMULTANEOUS_QUERIES)\n")


class GatewayServer(ThreadingHTTPServer):
    """A thread per connection, at most `max_connections` of them (more: 503 at once); the
    engine serializes what reaches chDB."""

    daemon_threads = True
    block_on_close = False  # idle kept-alive connections must not hold up a stop
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, address: tuple[str, int], engine: Engine | None = None, *, max_connections: int = 64) -> None:
        super().__init__(address, _Handler)
        self.engine = engine
        self.gate: Gate | None = None
        self.slots = threading.BoundedSemaphore(max_connections)

    def process_request(self, request, client_address) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=UTF-8\r\n"
                                b"X-ClickHouse-Exception-Code: 202\r\nConnection: close\r\n"
                                b"Content-Length: %d\r\n\r\n" % len(BUSY_REPLY) + BUSY_REPLY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def parse_listen(listen: str) -> tuple[str, int]:
    """'host:port' (or ':port', '[::1]:port') → (host, port); the host defaults to loopback."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen: {listen!r} is not host:port, e.g. 127.0.0.1:8123")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(listen: str, *, max_connections: int = 64) -> GatewayServer:
    """Bind the listening socket (before the database is opened, so a taken port costs nothing)."""
    host, port = parse_listen(listen)
    try:
        return GatewayServer((host, port), max_connections=max_connections)
    except OSError as exc:
        reason = "address already in use" if exc.errno == 98 else (exc.strerror or str(exc))
        raise GpubillError(f"cannot listen on {host}:{port}: {reason} (another gateway or ClickHouse server?)") from None


def sql_guard(engine: Engine) -> SqlGuard:
    """The guard, from the engine's own lists of table functions, engines and setting aliases."""
    database = engine.database

    def names(sql: str) -> set[str]:
        try:
            return {str(row[0]) for row in database.query(sql)}
        except DatabaseError:
            return set()  # an older chDB without this system table: the static lists cover it

    try:
        aliases = {str(name): str(target) for name, target in
                   database.query("SELECT name, alias_for FROM system.settings WHERE alias_for != ''")}
    except DatabaseError:
        aliases = {}
    return SqlGuard(names("SELECT name FROM system.table_functions"),
                    names("SELECT name FROM system.table_engines") | names("SELECT name FROM system.database_engines"),
                    aliases)


# statements the guard must refuse on the installed chDB, each harmless if it ran
GUARD_PROBES = ("SELECT * FROM file('/nonexistent/gpubill-guard-probe')", "SYSTEM FLUSH LOGS",
                "SELECT 1 SETTINGS max_execution_time = 1", "SELECT count() FROM (SELECT * FROM url('http://127.0.0.1:9/'))")


def check_guard(engine: Engine, guard: SqlGuard) -> None:
    """At start-up: the guard still recognises, in this chDB's EXPLAIN AST and formatQuery,
    what it must refuse; raises GpubillError (the gateway does not start) when it does not."""
    for sql in GUARD_PROBES:
        try:
            engine.run(Statement(sql=sql), guard.inspect)
        except GatewayError:
            continue
        except StatementFailed as exc:
            raise GpubillError(f"the gateway's SQL guard does not fit chDB {engine.version}: {sql!r} reached "
                               f"the engine ({str(exc)[:200]})") from None
        raise GpubillError(f"the gateway's SQL guard does not fit chDB {engine.version}: {sql!r} ran")
    log.info("SQL guard checked against chDB %s (%d probes refused)", engine.version, len(GUARD_PROBES))


def serve(settings: Settings, listen: str, *, announce: Callable[[str], None] = log.warning,
          stop: threading.Event | None = None) -> None:
    """Serve the embedded database of `settings` on `listen` until SIGTERM/SIGINT (or `stop` is set).

    A stop finishes the statement in flight, refuses later ones and closes the database.
    """
    dsn = normalize_dsn(settings.clickhouse)
    if not dsn.startswith("chdb:"):
        raise ConfigError(f"GPUBILL_CLICKHOUSE: the gateway serves an embedded database (chdb:///path), not {redact(dsn)}")
    server = bind(listen, max_connections=settings.gateway_max_connections)
    try:
        credentials, created = load_credentials(settings.home_path, {
            WRITER: _secret(settings.gateway_password), READER: _secret(settings.gateway_finance_password)})
        limits = Limits(max_execution_s=settings.gateway_max_execution_s,
                        max_memory_bytes=settings.gateway_max_memory_mb << 20)
        server.engine = Engine(open_database(dsn), lock_wait_s=float(settings.gateway_max_execution_s))
    except BaseException:
        server.server_close()
        raise
    host, port = server.server_address[:2]
    try:
        server.gate = Gate(credentials, BrowserGuard(host, port), sql_guard(server.engine), limits,
                           settings.gateway_max_body_mb << 20)
        check_guard(server.engine, server.gate.guard)
    except BaseException:
        server.server_close()
        server.engine.close()
        raise
    stop = stop or _stop_on_signals()
    if host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("listening on %s: reachable from the network, without TLS (passwords travel in clear)", host)
    thread = threading.Thread(target=server.serve_forever, name="gateway", daemon=True)
    thread.start()
    if created is not None:  # the first start: the only time the passwords are shown
        announce(f"generated the gateway's passwords into {created} (mode 0600; shown this once): "
                 f"user gpubill: {credentials.passwords[WRITER]}  user finance: {credentials.passwords[READER]}")
    if settings.gateway_password and settings.gateway_finance_password:
        where = "from settings"
    else:
        where = f"in {settings.home_path / CREDENTIALS_FILE}"
    announce(f"serving {dsn} as ClickHouse HTTP on http://{host}:{port}/ to users gpubill (read-write) and finance "
             f"(read-only), passwords {where}; point gpubill at it with "
             f"GPUBILL_CLICKHOUSE={redact(credentials.dsn(host, port))}")
    try:
        while not stop.wait(0.5):  # a timed wait lets the signal handlers run promptly
            pass
    finally:
        server.shutdown()
        server.server_close()
        server.engine.close()
        log.warning("gateway stopped; database closed")


def _secret(value) -> str | None:
    return value.get_secret_value() if value is not None else None


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop
