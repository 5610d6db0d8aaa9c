"""One process that holds the embedded ClickHouse and serves its HTTP interface to the others.

chDB allows one process per database directory, so `gpubill worker` and `gpubill audit`
cannot open it side by side. `gpubill clickhouse serve` is that one process: it opens the
database with the usual lock and migrations (`warehouse.connection.open_database`) and answers
the part of ClickHouse's HTTP protocol that clickhouse-connect's HTTP client speaks, so any
gpubill command runs next to it with `GPUBILL_CLICKHOUSE=http://127.0.0.1:8123/`.

    request ─► read_statement (pure: URL params, form fields, Content-Encoding, inline data)
            ─► Engine.run      (one request at a time, on a fresh chDB handle)
            ─► 200 + X-ClickHouse-Format/-Summary/-Query-Id, or 500 + ClickHouse's error text

What it answers: queries with server-side parameters (`param_*`, in the URL or as
multipart form fields), `database`, settings as URL parameters, any output format (the
client asks for Native), inserts whose data follows `INSERT ... FORMAT x` in the body or
the `query` parameter (lz4, zstd, gzip, deflate and, when installed, br request bodies),
commands, and `/ping`. What it does not: authentication, TLS, sessions (`SET`, `USE` and
temporary tables end with their request, as over HTTP without `session_id`), external
data, response compression (clients accept an identity body). A development and
small-site tool: bind it to loopback, as the default does.
"""

from __future__ import annotations

import email.parser
import email.policy
import gzip
import json
import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qsl, urlsplit

from gpubill.errors import ConfigError, GpubillError
from warehouse.chdb_engine import Engine, Statement, StatementFailed
from warehouse.connection import normalize_dsn, open_database, redact

log = logging.getLogger("gpubill.gateway")

IDLE_TIMEOUT_S = 120.0  # a kept-alive connection that sends nothing for this long is closed

# URL parameters that steer the HTTP transport; every other one (not param_*) is a setting.
TRANSPORT_PARAMS = frozenset({
    "query", "database", "default_format", "query_id", "session_id", "session_timeout", "session_check",
    "compress", "decompress", "wait_end_of_query", "client_protocol_version", "buffer_size", "quota_key", "role",
    "user", "password", "enable_http_compression", "send_progress_in_http_headers",
    "http_headers_progress_interval_ms", "cancel_http_readonly_queries_on_client_close",
})
SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LEADING_COMMENTS = r"^\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*"
INSERT_WITH_FORMAT = re.compile(LEADING_COMMENTS + r"INSERT\b.*\bFORMAT\s+\w+\s*;?\s*$", re.IGNORECASE | re.DOTALL)
# `INSERT ... FORMAT x` + newline at the start of a body: the statement, then its data
INLINE_INSERT = re.compile(rb"(" + LEADING_COMMENTS.encode() + rb"INSERT\b.*?\bFORMAT\s+\w+)[ \t]*\r?\n",
                           re.IGNORECASE | re.DOTALL)

# ClickHouse error codes for what the gateway refuses before the engine sees it
BAD_ARGUMENTS = 36
UNKNOWN_COMPRESSION = 1002  # UNKNOWN_EXCEPTION: ClickHouse names no closer code over HTTP


class GatewayError(Exception):
    """A request the gateway answers with ClickHouse's error text (HTTP 500 unless `status`
    says); it goes to the HTTP client, never to the gateway's own user."""

    def __init__(self, code: int, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.code, self.status = code, status


# ------------------------------------------------------------------------------- requests


def read_statement(url_params: dict[str, str], headers: dict[str, str], body: bytes) -> Statement:
    """Read a request the way ClickHouse's HTTP interface does.

    The SQL is the `query` parameter (then the body is its data) or the body itself (then
    an `INSERT ... FORMAT x` line may be followed by the data). Raises GatewayError for
    what it cannot honour, before anything runs.
    """
    body = decode_body(body, headers.get("content-encoding", ""))
    fields = dict(url_params)
    content_type = headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        fields.update(form_fields(content_type, body))
        body = b""
    query = fields.get("query", "")
    sql, data = (query, body) if query else split_inline_data(body)
    if data and not INSERT_WITH_FORMAT.match(sql):
        sql, data = f"{sql}\n{_text(data)}", b""  # ClickHouse runs query parameter + body as one statement
    settings = {k: v for k, v in fields.items()
                if k not in TRANSPORT_PARAMS and not k.startswith(("param_", "http_"))}
    for name in settings:
        if not SETTING_NAME.match(name):
            raise GatewayError(BAD_ARGUMENTS, f"Code: {BAD_ARGUMENTS}. DB::Exception: Invalid setting name {name!r}. (BAD_ARGUMENTS)")
    return Statement(
        sql=sql.strip(), data=data,
        params={k[len("param_"):]: v for k, v in fields.items() if k.startswith("param_")},
        settings=settings, database=fields.get("database") or None,
        default_format=fields.get("default_format") or "TabSeparated", query_id=fields.get("query_id") or "",
    )


def split_inline_data(body: bytes) -> tuple[str, bytes]:
    """(SQL, data) of a body: data only after an `INSERT ... FORMAT x` first line."""
    match = INLINE_INSERT.match(body)
    if match:
        return _text(match.group(1)), body[match.end():]
    return _text(body), b""


def decode_body(body: bytes, content_encoding: str) -> bytes:
    """The request body without its Content-Encoding. clickhouse-connect compresses inserts
    by default (lz4 when installed), one complete frame per block: every frame is read."""
    encoding = content_encoding.strip().lower()
    if not body or encoding in ("", "identity"):
        return body
    try:
        if encoding == "lz4":
            return _lz4_frames(body)
        if encoding == "zstd":
            from backports import zstd

            return zstd.decompress(body)
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
        if encoding == "br":
            import brotli

            return brotli.decompress(body)
    except ImportError:
        pass  # the encoding is known but its codec is not installed here
    except Exception as exc:  # noqa: BLE001 - every codec has its own error type
        raise GatewayError(BAD_ARGUMENTS, f"Code: {BAD_ARGUMENTS}. DB::Exception: cannot decompress the "
                                          f"{encoding} request body: {exc}. (BAD_ARGUMENTS)") from exc
    raise GatewayError(UNKNOWN_COMPRESSION, f"Code: {UNKNOWN_COMPRESSION}. DB::Exception: the gateway cannot read "
                       f"Content-Encoding {encoding!r}; create the client with compress=False. (UNKNOWN_EXCEPTION)")


def _lz4_frames(body: bytes) -> bytes:
    import lz4.frame

    out = []
    while body:
        decompressor = lz4.frame.LZ4FrameDecompressor()
        out.append(decompressor.decompress(body))
        if not decompressor.eof:
            raise ValueError("truncated lz4 frame")
        body = decompressor.unused_data
    return b"".join(out)


def form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """The text fields of a multipart/form-data body (clickhouse-connect sends the query and
    its parameters this way when they are too long for a URL). File fields are external
    data, which the gateway does not serve."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields = {}
    for part in message.iter_parts():
        if part.get_filename() is not None:
            raise GatewayError(BAD_ARGUMENTS, f"Code: {BAD_ARGUMENTS}. DB::Exception: external data "
                                              "(file fields) is not supported by the gpubill gateway. (BAD_ARGUMENTS)")
        name = part.get_param("name", header="content-disposition")
        fields[name] = _text(part.get_payload(decode=True) or b"")
    return fields


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GatewayError(BAD_ARGUMENTS, f"Code: {BAD_ARGUMENTS}. DB::Exception: the statement is not UTF-8 "
                                          f"({exc.reason} at byte {exc.start}). (BAD_ARGUMENTS)") from None


# ----------------------------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    """ClickHouse's HTTP interface, as far as clickhouse-connect uses it."""

    protocol_version = "HTTP/1.1"  # keep-alive: clickhouse-connect pools its connections
    server_version = "gpubill-clickhouse-gateway"
    timeout = IDLE_TIMEOUT_S
    server: "GatewayServer"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        if path == "/ping" or (path == "/" and "query=" not in self.path):
            self._reply(200, b"Ok.\n", {"Content-Type": "text/plain; charset=UTF-8"})
        elif path == "/":
            self._answer(b"")
        else:
            self._reply(404, b"There is no handle " + path.encode() + b"\n", {})

    def do_POST(self) -> None:  # noqa: N802
        try:
            body = self._body()
        except (ValueError, OSError) as exc:
            self.close_connection = True
            self._reply(400, f"bad request body: {exc}\n".encode(), {})
            return
        self._answer(body)

    def _answer(self, body: bytes) -> None:
        url_params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        headers = {k.lower(): v for k, v in self.headers.items()}
        query_id = url_params.get("query_id") or str(uuid.uuid4())
        common = {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": self.server.engine.timezone,
                  "X-ClickHouse-Server-Display-Name": "gpubill-gateway"}
        started = time.monotonic()
        try:
            answer = self.server.engine.run(read_statement(url_params, headers, body))
        except (GatewayError, StatementFailed) as exc:
            log.info("statement refused in %.3f s: %s", time.monotonic() - started, str(exc)[:300])
            self._reply(exc.status, (str(exc) + "\n").encode(), {
                **common, "X-ClickHouse-Exception-Code": str(exc.code), "Content-Type": "text/plain; charset=UTF-8"})
            return
        except Exception as exc:  # noqa: BLE001 - a gateway bug answers as a ClickHouse error, never a hang
            log.exception("gateway failure")
            message = f"Code: 1002. DB::Exception: gpubill gateway failure: {exc}. (UNKNOWN_EXCEPTION)\n"
            self._reply(500, message.encode(), {**common, "X-ClickHouse-Exception-Code": "1002"})
            return
        extra = {"X-ClickHouse-Summary": json.dumps(answer.summary), "Content-Type": "application/octet-stream"}
        if answer.result_format:
            extra["X-ClickHouse-Format"] = answer.result_format
        self._reply(200, answer.body, {**common, **extra})

    def _body(self) -> bytes:
        """The request body, sent with a Content-Length or chunked (clickhouse-connect streams
        inserts chunked)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        log.debug("%s %s", self.address_string(), format % args)


class GatewayServer(ThreadingHTTPServer):
    """A thread per connection; the engine serializes what reaches chDB."""

    daemon_threads = True
    block_on_close = False  # idle kept-alive connections must not hold up a stop

    def __init__(self, address: tuple[str, int], engine: Engine | None = None) -> None:
        super().__init__(address, _Handler)
        self.engine = engine


def parse_listen(listen: str) -> tuple[str, int]:
    """'host:port' (or ':port', '[::1]:port') → (host, port); the host defaults to loopback."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"--listen: {listen!r} is not host:port, e.g. 127.0.0.1:8123")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(listen: str) -> GatewayServer:
    """Bind the listening socket (before the database is opened, so a taken port costs nothing)."""
    host, port = parse_listen(listen)
    try:
        return GatewayServer((host, port))
    except OSError as exc:
        reason = "address already in use" if exc.errno == 98 else (exc.strerror or str(exc))
        raise GpubillError(f"cannot listen on {host}:{port}: {reason} (another gateway or ClickHouse server?)") from None


def serve(dsn: str, listen: str, *, announce: Callable[[str], None] = log.warning,
          stop: threading.Event | None = None) -> None:
    """Serve the embedded database at `dsn` on `listen` until SIGTERM/SIGINT (or `stop` is set).

    A stop finishes the statement in flight, refuses later ones and closes the database.
    """
    dsn = normalize_dsn(dsn)
    if not dsn.startswith("chdb:"):
        raise ConfigError(f"GPUBILL_CLICKHOUSE: the gateway serves an embedded database (chdb:///path), not {redact(dsn)}")
    server = bind(listen)
    try:
        server.engine = Engine(open_database(dsn))
    except BaseException:
        server.server_close()
        raise
    stop = stop or _stop_on_signals()
    host, port = server.server_address[:2]
    if host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("listening on %s: anyone who can reach it can read and write the database (no authentication)", host)
    thread = threading.Thread(target=server.serve_forever, name="gateway", daemon=True)
    thread.start()
    announce(f"serving {dsn} as ClickHouse HTTP on http://{host}:{port}/ (GPUBILL_CLICKHOUSE=http://{host}:{port}/)")
    try:
        while not stop.wait(0.5):  # a timed wait lets the signal handlers run promptly
            pass
    finally:
        server.shutdown()
        server.server_close()
        server.engine.close()
        log.warning("gateway stopped; database closed")


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


class GatewayStartError(GpubillError):
    """`spawn` could not start the gateway."""


def spawn(env: dict, port: int, *, cwd: Path | None = None, timeout_s: float = 60.0) -> subprocess.Popen:
    """`gpubill clickhouse serve` on 127.0.0.1:`port` as a child process, returned once it
    listens (its stderr is a text pipe). Raises GatewayStartError when it exits or stays deaf."""
    process = subprocess.Popen(
        [sys.executable, "-m", "gpubill.cli", "clickhouse", "serve", "--listen", f"127.0.0.1:{port}"],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise GatewayStartError(f"the ClickHouse gateway exited {process.returncode}: {process.stderr.read()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.1)
    process.kill()
    raise GatewayStartError(f"the ClickHouse gateway did not listen on port {port} within {timeout_s:.0f} s")
