"""Structured logs for the long-running commands: one JSON object per line on stderr.

`setup_logging` is called by `worker`, `up`, `scheduler` and `clickhouse serve`; the
short commands print through rich instead and only call `quiet_libraries`.

`up` on a terminal (`--log-format auto`, the default, with stdout and stderr terminals; or
`human`) keeps the terminal for people: its banner, then warnings and errors as short lines
(`HumanFormatter`), while every line at INFO and above goes, as JSON, to a file
(`setup_logging(..., json_file=...)`). Piped, or asked (`--log-format json`,
GPUBILL_LOG_FORMAT=json), every line is JSON on stderr, as for the other commands.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

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


class HumanFormatter(logging.Formatter):
    """One short line for people: `00:49:59 warning gpubill.gateway: listening on …` (UTC time,
    terminal escapes removed; an exception's last line only — the JSON file has it whole)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, timezone.utc).strftime("%H:%M:%S")
        text = f"{stamp} {record.levelname.lower()} {record.name}: {_ANSI.sub('', record.getMessage())}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        return text


LOG_FORMATS = ("auto", "human", "json")
LOG_FILE_BYTES = 20 << 20  # a JSON log file is rotated at this size, LOG_FILE_KEEP older ones kept
LOG_FILE_KEEP = 5


def human_logs(log_format: str, stdout: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Whether `log_format` (one of LOG_FORMATS) means the terminal form: `human`, or `auto`
    with both stdout and stderr on a terminal. ValueError for another value."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"{log_format!r} is not one of {', '.join(LOG_FORMATS)}")
    if log_format != "auto":
        return log_format == "human"
    return all(_isatty(stream) for stream in (stdout or sys.stdout, stderr or sys.stderr))


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def setup_logging(level: str = "INFO", *, json_file: Path | None = None, file_mode: int = 0o640) -> None:
    """Send every logger's records at `level` and above to stderr as JSON lines; or, with
    `json_file`, to that file as JSON lines (created with `file_mode`, rotated at
    LOG_FILE_BYTES) and only warnings and errors to stderr, as HumanFormatter's short lines."""
    handler = logging.StreamHandler(sys.stderr)
    if json_file is None:
        handler.setFormatter(JsonFormatter())
        logging.basicConfig(level=level, handlers=[handler], force=True)
    else:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(json_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, file_mode))  # its mode, from the start
        to_file = logging.handlers.RotatingFileHandler(json_file, maxBytes=LOG_FILE_BYTES, backupCount=LOG_FILE_KEEP,
                                                       encoding="utf-8")
        to_file.setFormatter(JsonFormatter())  # the worker keeps the command's format when a handler has this one
        handler.setFormatter(HumanFormatter())
        handler.setLevel(logging.WARNING)
        logging.basicConfig(level=level, handlers=[to_file, handler], force=True)
    quiet_libraries()


def quiet_libraries() -> None:
    """Silence the client libraries' own logs of refused connections."""
    # kafka-python and clickhouse-connect log every refused connection; their errors reach
    # the user translated (KafkaUnreachable, DatabaseError), so their own lines are noise.
    for name in ("kafka", "clickhouse_connect"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
