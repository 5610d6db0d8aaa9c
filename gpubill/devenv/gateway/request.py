"""A request to the gateway as ClickHouse's HTTP interface reads it, with the gateway's limits.

    read_statement: URL params + form fields + body ─► Statement (SQL, insert data, settings)
    decode_body:    Content-Encoding ─► bytes, decompressed incrementally and never past a cap

Every refusal is a GatewayError: ClickHouse's error text, its code and the HTTP status, for
the HTTP client (never the gateway's own user).
"""

from __future__ import annotations

import email.parser
import email.policy
import re
import zlib

from warehouse.chdb_engine import Statement

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
LIMIT_EXCEEDED = 290
UNKNOWN_COMPRESSION = 1002  # UNKNOWN_EXCEPTION: ClickHouse names no closer code over HTTP


class GatewayError(Exception):
    """A request the gateway answers with ClickHouse's error text (HTTP 500 unless `status`
    says); it goes to the HTTP client, never to the gateway's own user."""

    def __init__(self, code: int, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.code, self.status = code, status


def refusal(code: int, name: str, text: str, status: int = 500) -> GatewayError:
    """A GatewayError worded as ClickHouse words its errors."""
    return GatewayError(code, f"Code: {code}. DB::Exception: {text}. ({name})", status)


def body_too_large(max_bytes: int, what: str = "request body") -> GatewayError:
    return refusal(LIMIT_EXCEEDED, "LIMIT_EXCEEDED", f"the {what} is larger than the gateway's limit of "
                   f"{max_bytes:,} bytes (GPUBILL_GATEWAY_MAX_BODY_MB); send smaller batches", 413)


def read_statement(url_params: dict[str, str], headers: dict[str, str], body: bytes, *,
                   max_body_bytes: int = 256 << 20) -> Statement:
    """Read a request the way ClickHouse's HTTP interface does.

    The SQL is the `query` parameter (then the body is its data) or the body itself (then
    an `INSERT ... FORMAT x` line may be followed by the data). Raises GatewayError for
    what it cannot honour, before anything runs.
    """
    body = decode_body(body, headers.get("content-encoding", ""), max_body_bytes)
    fields = dict(url_params)
    content_type = headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        for name, value in form_fields(content_type, body).items():
            if name in fields:  # a second value must not quietly replace the first (readonly=1&readonly=0)
                raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"parameter {name!r} is given twice", 400)
            fields[name] = value
        body = b""
    query = fields.get("query", "")
    sql, data = (query, body) if query else split_inline_data(body)
    if data and not INSERT_WITH_FORMAT.match(sql):
        sql, data = f"{sql}\n{_text(data)}", b""  # ClickHouse runs query parameter + body as one statement
    settings = {k: v for k, v in fields.items()
                if k not in TRANSPORT_PARAMS and not k.startswith(("param_", "http_"))}
    for name in settings:
        if not SETTING_NAME.match(name):
            raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"Invalid setting name {name[:64]!r}")
    return Statement(
        sql=sql.strip(), data=data,
        params={k[len("param_"):]: v for k, v in fields.items() if k.startswith("param_")},
        settings=settings, database=_one_of(fields, headers, "database") or None,
        default_format=_one_of(fields, headers, "default_format", "format") or "TabSeparated",
        query_id=_one_of(fields, headers, "query_id") or "",
    )


def _one_of(fields: dict[str, str], headers: dict[str, str], name: str, header: str | None = None) -> str:
    """A parameter that ClickHouse also reads from an X-ClickHouse-* header (the JDBC driver
    asks for its format and database that way); given both ways, they must agree."""
    value = fields.get(name, "")
    from_header = headers.get(f"x-clickhouse-{header or name.replace('_', '-')}", "").strip()
    if value and from_header and value != from_header:
        raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"{name} is {value[:64]!r} in the URL but {from_header[:64]!r} "
                      "in its X-ClickHouse header", 400)
    return value or from_header


def url_parameters(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The URL's parameters; a name given twice is refused (which one wins is how
    `?readonly=1&readonly=0` became writable)."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"URL parameter {name[:64]!r} is given twice", 400)
        params[name] = value
    return params


def split_inline_data(body: bytes) -> tuple[str, bytes]:
    """(SQL, data) of a body: data only after an `INSERT ... FORMAT x` first line."""
    match = INLINE_INSERT.match(body)
    if match:
        return _text(match.group(1)), body[match.end():]
    return _text(body), b""


def decode_body(body: bytes, content_encoding: str, max_bytes: int = 256 << 20) -> bytes:
    """The request body without its Content-Encoding, never longer than `max_bytes`: codecs
    inflate incrementally and stop one byte past the cap (a 255 KB gzip bomb costs the cap,
    not 1.26 GB). clickhouse-connect compresses inserts by default (lz4 when installed),
    one complete frame per block: every frame (and gzip member) is read."""
    if len(body) > max_bytes:
        raise body_too_large(max_bytes)
    encoding = content_encoding.strip().lower()
    if not body or encoding in ("", "identity"):
        return body
    try:
        if encoding == "lz4":
            return _frames(body, _lz4_decompressor, max_bytes)
        if encoding == "zstd":
            return _frames(body, _zstd_decompressor, max_bytes)
        if encoding == "gzip":
            return _frames(body, lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), max_bytes)
        if encoding == "deflate":
            return _frames(body, lambda: zlib.decompressobj(zlib.MAX_WBITS), max_bytes, one=True)
    except ImportError:
        pass  # the encoding is known but its codec is not installed here
    except GatewayError:
        raise
    except Exception as exc:  # noqa: BLE001 - every codec has its own error type
        raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"cannot decompress the {encoding} request body: {exc}") from exc
    raise refusal(UNKNOWN_COMPRESSION, "UNKNOWN_EXCEPTION", f"the gateway cannot read Content-Encoding "
                  f"{encoding[:32]!r}; create the client with compress=False (or lz4, zstd, gzip, deflate)")


def _lz4_decompressor():
    import lz4.frame

    return lz4.frame.LZ4FrameDecompressor()


def _zstd_decompressor():
    from backports import zstd

    return zstd.ZstdDecompressor()


def _frames(body: bytes, new_decompressor, max_bytes: int, *, one: bool = False) -> bytes:
    """Inflate back-to-back frames (members) with a fresh decompressor each; each call may
    return at most the room left under the cap plus one byte, which tells "over" apart."""
    out = bytearray()
    data = body
    while data:
        decompressor = new_decompressor()
        room = max_bytes - len(out) + 1
        out += decompressor.decompress(data, room)
        if len(out) > max_bytes:
            raise body_too_large(max_bytes, "decompressed request body")
        if not decompressor.eof:
            raise ValueError("truncated stream")
        data = decompressor.unused_data
        if one and data:
            raise ValueError("data after the end of the stream")
    return bytes(out)


def form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """The text fields of a multipart/form-data body (clickhouse-connect sends the query and
    its parameters this way when they are too long for a URL). File fields are external
    data, which the gateway does not serve."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, str] = {}
    for part in message.iter_parts():
        if part.get_filename() is not None:
            raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", "external data (file fields) is not supported by the "
                                                          "gpubill gateway")
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", "a form field without a name")
        if name in fields:
            raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"form field {name[:64]!r} is given twice", 400)
        fields[name] = _text(part.get_payload(decode=True) or b"")
    return fields


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refusal(BAD_ARGUMENTS, "BAD_ARGUMENTS", f"the statement is not UTF-8 ({exc.reason} at byte "
                                                      f"{exc.start})") from None
