"""Errors of the ClickHouse seam: one line each, saying what to do.

    WarehouseError           base; the CLI prints str(exc) and exits 1
    ├── DsnInvalid           GPUBILL_CLICKHOUSE is not a DSN we can open (scheme, host, path)
    └── DatabaseError        ClickHouse refused a statement or could not be reached
        └── DatabaseBusy     the embedded chDB directory is held by another process

The ClickHouse client's own errors never leave this package: `warehouse.connection`
translates them, `from` the original.
"""


class WarehouseError(Exception):
    """Base of every error of the warehouse package."""


class DsnInvalid(WarehouseError):
    """Raised by `normalize_dsn` / `open_database` for a DSN that names no usable database."""


class DatabaseError(WarehouseError):
    """ClickHouse could not be opened or refused a statement (the DSN is named, never its password)."""


class DatabaseBusy(DatabaseError):
    """The embedded chDB database is locked by another process (one process per directory)."""
