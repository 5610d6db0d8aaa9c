"""One crash path (issue 22, item 4.5): every "state unknown, restart" exit goes through
streams/crash.py — one log line with the reason, gpubill_crashes_total{reason}, the logs
flushed, exit status 3 — and nothing else in the project calls os._exit."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import streams.crash as crash_module
from billing_rules import DEFAULT_RULES_DIR, load_rules
from gpubill.logs import JsonFormatter
from streams.crash import EXIT_STATUS, REASONS, TEXTFILE_VARIABLE, crash
from streams.pipeline import Pipeline
from streams.rating.reference_batch import PythonRater

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = ("gpubill", "streams", "billing", "usage", "reports", "tenant_api", "warehouse", "schemas",
                    "billing_rules")


class Exited(BaseException):
    """What the monkeypatched os._exit raises instead of ending the test run."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


@pytest.fixture
def exits(monkeypatch) -> list[str]:
    """os._exit and logging.shutdown replaced: the statuses asked for, and the flushes, in order."""
    calls: list[str] = []

    def fake_exit(status: int) -> None:
        calls.append(f"exit {status}")
        raise Exited(status)

    monkeypatch.setattr(crash_module.os, "_exit", fake_exit)
    monkeypatch.setattr(crash_module.logging, "shutdown", lambda: calls.append("logs flushed"))
    monkeypatch.delenv(TEXTFILE_VARIABLE, raising=False)
    return calls


def crashes(reason: str) -> float:
    return REGISTRY.get_sample_value("gpubill_crashes_total", {"reason": reason}) or 0.0


def test_a_crash_logs_one_line_counts_flushes_and_exits_3(exits, caplog):
    before = crashes("feeder-failed")
    with caplog.at_level(logging.CRITICAL, logger="gpubill.crash"), pytest.raises(Exited) as exited:
        try:
            raise RuntimeError("the broker went away")
        except RuntimeError:
            crash("feeder-failed", "the Kafka feeder failed")
    assert exited.value.status == EXIT_STATUS == 3
    assert exits == ["logs flushed", "exit 3"]  # flushed before the exit, and the exit is the last thing
    assert crashes("feeder-failed") == before + 1
    (record,) = caplog.records
    assert record.levelname == "CRITICAL" and record.reason == "feeder-failed" and record.crashes == before + 1
    line = JsonFormatter().format(record)
    assert "\n" not in line  # one structured line, the traceback inside it
    entry = json.loads(line)
    assert entry["reason"] == "feeder-failed" and entry["msg"].startswith("the Kafka feeder failed; exiting with status 3")
    assert "RuntimeError: the broker went away" in entry["exc"]


def test_outside_an_except_block_the_line_has_no_exception(exits, caplog):
    with caplog.at_level(logging.CRITICAL, logger="gpubill.crash"), pytest.raises(Exited):
        crash("clickhouse-refused", "ClickHouse refused a batch for good")
    (record,) = caplog.records
    assert record.exc_info is None and "exc" not in json.loads(JsonFormatter().format(record))


def test_an_unlisted_reason_still_exits_under_one_label(exits, caplog):
    with caplog.at_level(logging.CRITICAL, logger="gpubill.crash"), pytest.raises(Exited):
        crash("Tenant acme broke it", "something")
    assert caplog.records[0].reason == "unlisted" and "unlisted reason" in caplog.records[0].getMessage()


def test_the_textfile_count_survives_the_restart(exits, monkeypatch, tmp_path):
    textfile = tmp_path / "gpubill_crashes.prom"
    monkeypatch.setenv(TEXTFILE_VARIABLE, str(textfile))
    for reason in ("spend-not-produced", "spend-not-produced", "tracker-failed"):  # three processes, one each
        with pytest.raises(Exited):
            crash(reason, "gone")

    samples = {s.labels["reason"]: s.value for family in text_string_to_metric_families(textfile.read_text())
               for s in family.samples if s.name == "gpubill_crashes_total"}
    assert samples == {"spend-not-produced": 2.0, "tracker-failed": 1.0}


def test_an_unwritable_textfile_does_not_stop_the_exit(exits, monkeypatch, tmp_path):
    monkeypatch.setenv(TEXTFILE_VARIABLE, str(tmp_path / "no-such-dir" / "crashes.prom"))
    with pytest.raises(Exited) as exited:
        crash("batch-failed", "a bug")
    assert exited.value.status == 3


def test_a_failed_batch_goes_through_the_crash_path(exits):
    """Pipeline.in_thread: what fails in the rating or writer thread ends the process through
    crash(), never marked done (and so never committed)."""
    rules = load_rules(DEFAULT_RULES_DIR)
    pipeline = Pipeline(rules=rules, sink=None, rater=PythonRater(rules))
    before = crashes("batch-failed")

    def broken() -> None:
        raise ValueError("a bug")

    try:
        with pytest.raises(Exited):
            asyncio.run(pipeline.in_writer_thread(broken))
    finally:
        pipeline.executor.shutdown(wait=True)
        pipeline.writer.shutdown(wait=True)
    assert exits == ["logs flushed", "exit 3"]
    assert crashes("batch-failed") == before + 1


def _sources() -> list[Path]:
    return sorted(path for package in RUNTIME_PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_nothing_but_the_crash_module_calls_os_exit():
    """Every former `os._exit(3)` (the pipeline's threads, the agent's spend, the feeder, the
    spend take-over, the tracker's agent and evaluation) goes through crash()."""
    offenders = [f"{path.relative_to(ROOT)}:{number}" for path in _sources() if path != ROOT / "streams/crash.py"
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"\b_exit\(", line)]
    assert offenders == []


def test_the_former_call_sites_use_crash():
    uses = {name: len(re.findall(r"\bcrash\(\"([a-z-]+)\"", (ROOT / name).read_text(encoding="utf-8")))
            for name in ("streams/pipeline.py", "streams/worker.py", "streams/spend/app.py")}
    assert uses == {"streams/pipeline.py": 4, "streams/worker.py": 3, "streams/spend/app.py": 4}
    named = {reason for name in uses for reason in re.findall(r"\bcrash\(\"([a-z-]+)\"", (ROOT / name).read_text())}
    assert named <= REASONS
