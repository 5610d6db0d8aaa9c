"""The one way out when the worker's state is unknown: say why, count it, exit 3 to be restarted.

A batch that could not be written, spend that could not be produced, a feeder or a tracker
that failed: carrying on would leave a worker that consumes nothing, or one that commits what
it never wrote. Every such place calls `crash(reason, message)`, which

1. logs one structured line at CRITICAL (`reason`, the message, the count, and the exception
   being handled when there is one: one JSON object, one line — streams of tracebacks are
   left to the exception's own `exc` field);
2. increments `gpubill_crashes_total{reason=…}`: in this process's registry, and — because a
   process about to exit is never scraped again — in the Prometheus textfile named by
   $GPUBILL_CRASH_METRICS when it is set (node exporter's textfile collector reads it), where
   the count survives the restart;
3. flushes the logs (logging.shutdown);
4. calls os._exit(3): no finally block, no atexit hook, nothing in flight committed. Offsets are
   committed only behind written batches (docs/guarantees.md), so the process that the
   supervisor (systemd, compose's restart policy) starts again re-reads what was not committed.

`reason` is a short fixed word (a metric label: never a tenant id or an error text), one of
REASONS. Nothing else in the project calls os._exit (tests/unit/test_crash.py holds it so).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

from prometheus_client import REGISTRY, CollectorRegistry, Counter, write_to_textfile
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["EXIT_STATUS", "REASONS", "TEXTFILE_VARIABLE", "crash"]

log = logging.getLogger("gpubill.crash")

EXIT_STATUS = 3
TEXTFILE_VARIABLE = "GPUBILL_CRASH_METRICS"
REASONS = frozenset({
    "clickhouse-refused",  # a statement refused for good (warehouse.errors.StatementRefused)
    "disk-full",  # ClickHouse's disk is full (warehouse.errors.DiskFull): free space, then restart
    "clickhouse-unavailable",  # the sink gave up retrying (ClickHouse down or failing for too long)
    "batch-failed",  # rating or writing a batch raised something else: a bug
    "spend-not-produced",  # a batch's spend records could not be produced
    "spend-takeover",  # the spend topic, or the tracker's changelog, could not be read at an assignment
    "feeder-failed",  # a Kafka feeder stopped (the rating worker's or the tracker's)
    "tracker-failed",  # the spend tracker failed on a record or an evaluation
    "stalled-stop-hung",  # a stalled worker's clean stop did not end (streams/liveness.py, issue 40)
})
_NAME, _HELP = "gpubill_crashes", "Exits with status 3 (state unknown, restart), by reason"
CRASHES = Counter(_NAME, _HELP, ["reason"], registry=REGISTRY)


def crash(reason: str, message: str, *, with_exception: bool = True) -> NoReturn:
    """Log, count and flush (see the module's steps), then exit with status 3. Never returns.
    Call it in the `except` block of what failed: the exception goes into the log line (unless
    `with_exception` is False: the message says all, e.g. ClickHouse's own refusal)."""
    if reason not in REASONS:  # a typo must not mint a label; the exit matters more than the word
        message, reason = f"{message} (unlisted reason {reason!r})", "unlisted"
    CRASHES.labels(reason).inc()
    count = _counted(reason)
    info = sys.exc_info()
    log.critical("%s; exiting with status %d to be restarted", message, EXIT_STATUS,
                 extra={"reason": reason, "crashes": count},
                 exc_info=info if with_exception and info[0] is not None else None)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
            pass
    os._exit(EXIT_STATUS)


def _counted(reason: str) -> int:
    """The crashes of `reason` so far: this process's count, or — with $GPUBILL_CRASH_METRICS —
    the textfile's count plus this one, written back (atomically: a temporary file renamed)."""
    path = os.environ.get(TEXTFILE_VARIABLE)
    if not path:
        return _in_process(reason)
    try:
        counts = _read(Path(path))
        counts[reason] = counts.get(reason, 0) + 1
        registry = CollectorRegistry()
        counter = Counter(_NAME, _HELP, ["reason"], registry=registry)
        for label, value in sorted(counts.items()):
            counter.labels(label).inc(value)
        write_to_textfile(path, registry)
        return counts[reason]
    except Exception:  # noqa: BLE001 - the exit must happen whatever the file says
        log.warning("could not count the crash in %s=%s", TEXTFILE_VARIABLE, path, exc_info=True)
        return _in_process(reason)


def _in_process(reason: str) -> int:
    for metric in CRASHES.collect():
        for sample in metric.samples:
            if sample.name == f"{_NAME}_total" and sample.labels.get("reason") == reason:
                return int(sample.value)
    return 0


def _read(path: Path) -> dict[str, int]:
    """reason → count from a textfile written by `_counted` (none: empty)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    counts: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == f"{_NAME}_total" and "reason" in sample.labels:
                counts[sample.labels["reason"]] = int(sample.value)
    return counts
