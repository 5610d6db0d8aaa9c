"""Structured logs for the long-running commands: one JSON object per line on stderr.

`setup_logging` is called by `worker`, `up`, `scheduler` and `clickhouse serve`; the
short commands print through rich instead and only call `quiet_libraries`.
"""

from __future__ import annotations

import logging
import re
import sys
from datetime import datetime, timezone

# The attributes every LogRecord has; whatever else a record carries came from `extra=`.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colour and cursor escapes some libraries put in messages


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (UTC), level, logger, msg (terminal escapes removed), the
    call's `extra` fields (and exc when there is one)."""

    gpubill_json = True  # streams/worker.py keeps a handler with this formatter instead of mode's own

    def format(self, record: logging.LogRecord) -> str:
        import orjson

        entry = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": _ANSI.sub("", record.getMessage()),
        }
        entry.update((k, v) for k, v in vars(record).items() if k not in _RECORD_FIELDS and k not in entry)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


def setup_logging(level: str = "INFO") -> None:
    """Send every logger's records at `level` and above to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    quiet_libraries()


def quiet_libraries() -> None:
    """Silence the client libraries' own logs of refused connections."""
    # kafka-python and clickhouse-connect log every refused connection; their errors reach
    # the user translated (KafkaUnreachable, DatabaseError), so their own lines are noise.
    for name in ("kafka", "clickhouse_connect"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
