"""Errors shown to users: one line each, saying what to do.

    GpubillError                    base; the CLI prints str(exc) and exits 1
    ├── ConfigError                 a setting is malformed (GPUBILL_* variables, settings file)
    ├── DatabaseError               ClickHouse refused or could not be reached
    │   └── DatabaseBusy            the embedded chDB directory is held by another process
    ├── InputFileError              a file named on the command line is missing or unreadable
    └── NotFound                    the thing asked for does not exist (invoice, tenant, period)

Kafka errors live with the local broker (`gpubill.kafka_local`) and rule errors with the
rules (`billing_rules.errors`); both are translated at the CLI boundary.
"""


class GpubillError(Exception):
    """Base of every error the CLI reports as one line with a non-zero exit."""


class ConfigError(GpubillError):
    """A setting is malformed: raised while reading GPUBILL_* variables or the settings file."""


class DatabaseError(GpubillError):
    """ClickHouse could not be opened or refused a statement (the DSN is named, never its password)."""


class DatabaseBusy(DatabaseError):
    """The embedded chDB database is locked by another process (one process per directory)."""


class InputFileError(GpubillError):
    """A file named on the command line cannot be read."""


class NotFound(GpubillError):
    """A period, tenant or invoice that was asked for does not exist."""
