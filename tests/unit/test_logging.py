"""Structured logs: one JSON object per line, with the call's `extra` fields."""

from __future__ import annotations

import json
import logging

from gpubill.logs import JsonFormatter as _JsonFormatter


def test_a_log_line_is_one_json_object_with_its_extra_fields() -> None:
    record = logging.getLogger("gpubill.feeder").makeRecord(
        "gpubill.feeder", logging.INFO, __file__, 1, "partitions revoked: %d", (3,), None,
        extra={"revoked": 3, "partitions": ["gpu.usage.v1:0"]})
    line = _JsonFormatter().format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert {k: entry[k] for k in ("level", "logger", "msg", "revoked", "partitions")} == {
        "level": "INFO", "logger": "gpubill.feeder", "msg": "partitions revoked: 3", "revoked": 3,
        "partitions": ["gpu.usage.v1:0"]}
    assert set(entry) == {"ts", "level", "logger", "msg", "revoked", "partitions"}  # no LogRecord internals


# One format and one zone for every line of `gpubill up` (issue 23, item 6) ------------------


def test_terminal_escapes_never_reach_a_json_log_line():
    # before: uvicorn's coloured level prefixes arrived as "\x1b[32mINFO\x1b[0m" inside the JSON
    import json
    import logging as _logging

    from gpubill.logs import JsonFormatter

    record = _logging.LogRecord("uvicorn.error", _logging.INFO, __file__, 1, "\x1b[32mINFO\x1b[0m:  started", (), None)
    assert json.loads(JsonFormatter().format(record))["msg"] == "INFO:  started"


def test_the_faust_worker_keeps_the_commands_json_lines(monkeypatch):
    # before: mode replaced the root handlers with its own "[2026-…] [pid] [INFO] [^Worker]" lines
    import logging as _logging

    from gpubill.logs import setup_logging
    from streams.worker import _Worker

    setup_logging("INFO")
    handlers = list(_logging.root.handlers)
    called = []
    monkeypatch.setattr("faust.Worker._setup_logging", lambda self: called.append(True))
    _Worker._setup_logging(object.__new__(_Worker))
    assert _logging.root.handlers == handlers and not called


def test_the_scheduler_says_its_times_in_utc():
    # before: "next run at: 2026-12-03 08:05:00 CST" beside UTC timestamps
    from datetime import timezone

    from apscheduler.schedulers.background import BackgroundScheduler

    from billing.scheduler import add_billing_job
    from tests.unit.test_current_usage import RULES

    scheduler = BackgroundScheduler(timezone=timezone.utc)
    add_billing_job(scheduler, lambda: None, RULES)
    job = scheduler.get_jobs()[0]
    assert str(job.trigger.timezone) in ("UTC", "utc")
