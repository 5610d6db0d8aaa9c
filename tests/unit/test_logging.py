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
