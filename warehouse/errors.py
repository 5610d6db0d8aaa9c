"""Errors of the ClickHouse seam: one line each, saying what to do.

    WarehouseError           base; the CLI prints str(exc) and exits 1
    ├── DsnInvalid           GPUBILL_CLICKHOUSE is not a DSN we can open (scheme, host, path)
    ├── ClusterSchemaError   the schema cannot be rendered for a cluster (warehouse/cluster.py)
    ├── SchemaNotReady       the server's schema is not the form this process runs against (a cluster's
    │                        with GPUBILL_CLICKHOUSE_CLUSTER unset, or the reverse), or a cluster's has
    │                        migrations pending: `open_database` applies none there
    └── DatabaseError        ClickHouse refused a statement or could not be reached (`permanent` False:
        │                    a retry may succeed — connection refused, timeout, too many parts, memory)
        ├── StatementRefused ClickHouse refused it for good (`permanent` True: PERMANENT_CODES)
        ├── DiskFull         the database's disk is full (`permanent` True: NOT_ENOUGH_SPACE, ENOSPC)
        └── DatabaseBusy     the embedded chDB directory is held by another process

The ClickHouse client's own errors never leave this package: `warehouse.connection`
translates them, `from` the original, and decides there — from ClickHouse's error code —
whether a retry can help.
"""

from __future__ import annotations


class WarehouseError(Exception):
    """Base of every error of the warehouse package."""


class DsnInvalid(WarehouseError):
    """Raised by `normalize_dsn` / `open_database` for a DSN that names no usable database."""


class ClusterSchemaError(WarehouseError):
    """Raised by warehouse/cluster.py for a cluster name it cannot use, or a migration statement it
    does not know how to render for a cluster (named, with the migration): never rendered wrong."""


class SchemaNotReady(WarehouseError):
    """Raised by `open_database` when the server's schema does not fit this process's setting
    GPUBILL_CLICKHOUSE_CLUSTER (a cluster's schema without it, a single server's with it), or when,
    on a cluster, migrations are pending: only `gpubill db migrate --cluster NAME` applies them."""


class DatabaseError(WarehouseError):
    """ClickHouse could not be opened or refused a statement (the DSN is named, never its password).

    `code`: ClickHouse's error code when it answered with one (None: no answer — connection
    refused, a timeout, a failpoint). `permanent`: whether retrying the same statement is
    pointless (False here: it may succeed later)."""

    permanent = False

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class StatementRefused(DatabaseError):
    """Raised when ClickHouse refuses a statement for a reason that retrying cannot remove — its
    error code is one of PERMANENT_CODES (a syntax error, an unknown table or column, a type
    mismatch, a value or size out of bounds, no permission): the statement, the schema or the
    grants must change first."""

    permanent = True


class DiskFull(DatabaseError):
    """Raised when ClickHouse could not write because its disk is full: error code 243
    NOT_ENOUGH_SPACE (a part's space could not be reserved: what chDB 26.x and a server say
    first), or the operating system's ENOSPC in the text ("No space left on device", under
    CANNOT_WRITE_TO_FILE_DESCRIPTOR and its kin). `path`: where space must be freed — the
    embedded database's directory, the file a server's message names, or the server's DSN;
    `detail`: what failed, in ClickHouse's words.

    `permanent` True: a retry seconds later passes only if a merge happened to free a little,
    and then the next batch fills it again; minutes of retries would only hide the cause. A
    person frees space (or gives the database a larger disk) and runs the command again."""

    permanent = True

    def __init__(self, message: str, *, code: int | None = None, path: str = "", detail: str = "") -> None:
        super().__init__(message, code=code)
        self.path = path
        self.detail = detail or message  # what failed, as ClickHouse said it (one line)


NOT_ENOUGH_SPACE = 243
# The operating system's "disk full" as ClickHouse words it when a write itself failed (errno 28),
# whatever code it wraps it in (CANNOT_WRITE_TO_FILE_DESCRIPTOR, CANNOT_FSYNC, STD_EXCEPTION …).
ENOSPC_TEXTS = ("No space left on device", "ENOSPC", "errno: 28,")


class DatabaseBusy(DatabaseError):
    """The embedded chDB database is locked by another process (one process per directory)."""


# ClickHouse's error codes (src/Common/ErrorCodes.cpp; tests/unit/test_database_errors.py holds the
# names to the installed engine's errorCodeToName) that no retry of the same statement can pass.
# Anything else — no code at all (connection refused, timed out), TOO_MANY_PARTS, MEMORY_LIMIT_EXCEEDED,
# TIMEOUT_EXCEEDED, TOO_MANY_SIMULTANEOUS_QUERIES, NETWORK_ERROR, KEEPER_EXCEPTION, an unknown code —
# is taken as transient: retried, as every error was before.
PERMANENT_CODES: dict[int, str] = {
    6: "CANNOT_PARSE_TEXT",
    8: "THERE_IS_NO_COLUMN",
    9: "SIZES_OF_COLUMNS_DOESNT_MATCH",
    10: "NOT_FOUND_COLUMN_IN_BLOCK",
    15: "DUPLICATE_COLUMN",
    16: "NO_SUCH_COLUMN_IN_TABLE",
    19: "SIZE_OF_FIXED_STRING_DOESNT_MATCH",
    20: "NUMBER_OF_COLUMNS_DOESNT_MATCH",
    26: "CANNOT_PARSE_QUOTED_STRING",
    27: "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    36: "BAD_ARGUMENTS",
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    42: "NUMBER_OF_ARGUMENTS_DOESNT_MATCH",
    43: "ILLEGAL_TYPE_OF_ARGUMENT",
    44: "ILLEGAL_COLUMN",
    46: "UNKNOWN_FUNCTION",
    47: "UNKNOWN_IDENTIFIER",
    48: "NOT_IMPLEMENTED",
    53: "TYPE_MISMATCH",
    60: "UNKNOWN_TABLE",
    62: "SYNTAX_ERROR",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",
    81: "UNKNOWN_DATABASE",
    115: "UNKNOWN_SETTING",
    117: "INCORRECT_DATA",
    128: "TOO_LARGE_ARRAY_SIZE",
    131: "TOO_LARGE_STRING_SIZE",
    158: "TOO_MANY_ROWS",
    164: "READONLY",
    190: "SIZES_OF_ARRAYS_DONT_MATCH",
    290: "LIMIT_EXCEEDED",  # also the chDB gateway's "body larger than the limit" (send smaller batches)
    307: "TOO_MANY_BYTES",
    321: "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE",
    349: "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
    386: "NO_COMMON_TYPE",
    396: "TOO_MANY_ROWS_OR_BYTES",
    497: "ACCESS_DENIED",
    516: "AUTHENTICATION_FAILED",
}
