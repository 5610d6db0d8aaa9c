"""Bad input on the command line: one clear line on stderr, a non-zero exit, no hang."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import FIXTURES, TEST_RULES

pytestmark = pytest.mark.e2e


def gpubill(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: float = 60):
    return subprocess.run(
        [sys.executable, "-m", "gpubill.cli", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "300", **(env or {})}, cwd=cwd,
    )


def assert_one_line_error(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_missing_replay_file(tmp_path):
    done = gpubill("replay", str(tmp_path / "nope.ndjson"), cwd=tmp_path)
    assert_one_line_error(done, "cannot read", "nope.ndjson")


@pytest.mark.parametrize("command", [
    ("replay", str(FIXTURES / "readings_part3.ndjson")),
    ("worker", "--drain"),
    ("simulate", "--gpus", "1", "--minutes", "1"),
])
def test_unreachable_broker_is_a_clear_error_within_30_s(tmp_path, command):
    began = time.monotonic()
    done = gpubill(*command, env={"GPUBILL_KAFKA": "127.0.0.1:1", "GPUBILL_CLICKHOUSE": f"chdb://{tmp_path}/db"},
                   cwd=tmp_path, timeout=60)
    assert time.monotonic() - began < 30
    assert_one_line_error(done, "no Kafka broker answers at 127.0.0.1:1", "gpubill kafka up")


@pytest.mark.parametrize("dsn, fragment", [
    ("foo://somewhere", "unsupported DSN"),
    ("http://gpubill:secret@127.0.0.1:1/gpubill", "cannot open ClickHouse at http://gpubill:***@127.0.0.1:1/gpubill"),
    ("chdb://", "needs a directory"),
])
def test_invalid_clickhouse_dsn(tmp_path, dsn, fragment):
    done = gpubill("invoice", "run", "--period", "2026-03", env={"GPUBILL_CLICKHOUSE": dsn}, cwd=tmp_path)
    assert_one_line_error(done, fragment)
    assert "secret" not in done.stderr


def test_missing_rules_directory(tmp_path):
    done = gpubill("rules", "check", str(tmp_path / "no-rules"), cwd=tmp_path)
    assert_one_line_error(done, "no-rules")


def test_invalid_rules_name_file_place_and_reason(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(TEST_RULES, rules)
    sites = rules / "sites.toml"
    sites.write_text(sites.read_text().replace("pue = 1.12", "pue = 0.9"))
    done = gpubill("rules", "check", str(rules), cwd=tmp_path)
    assert_one_line_error(done, "sites.toml", "gz-guian", "pue")
    # and a command that needs the rules refuses to start with them
    done = gpubill("invoice", "run", "--period", "2026-03",
                   env={"GPUBILL_RULES": str(rules), "GPUBILL_CLICKHOUSE": f"chdb://{tmp_path}/db"}, cwd=tmp_path)
    assert_one_line_error(done, "sites.toml")


def test_embedded_database_held_by_another_process(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from warehouse.connection import open_database; "
         f"db = open_database('chdb://{tmp_path}/db'); print('open', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        done = gpubill("dlq", "list", env={"GPUBILL_CLICKHOUSE": f"chdb://{tmp_path}/db"}, cwd=tmp_path)
        assert_one_line_error(done, f"{tmp_path}/db is in use by pid {holder.pid}", "GPUBILL_CLICKHOUSE")
    finally:
        holder.kill()
        holder.wait()


def test_bad_period_and_format(tmp_path):
    assert_one_line_error(gpubill("invoice", "run", "--period", "2026-13", cwd=tmp_path), "--period")
    done = gpubill("report", "cost-share", "--period", "2026-03", "--format", "xml", cwd=tmp_path)
    assert_one_line_error(done, "--format")


# ------------------------------------------- issue 13: stream input cannot bend a bill


def _usage_line(event_id: str, gpu: str, tenant: str, second: int = 5) -> str:
    return (f'{{"kind":"usage","event_id":"{event_id}","ts":"2026-03-01T00:00:{second:02d}Z","site":"gz-guian",'
            f'"node":"gz-n1","gpu_uuid":"{gpu}","gpu_model":"A800-80G","tenant":"{tenant}","instance":"i-1",'
            f'"util_pct":50,"mem_used_mib":1024}}')


def test_hostile_readings_are_dead_lettered_or_recorded_never_dropped_or_obeyed(gpubill, broker, tmp_path):
    from kafka.partitioner.default import murmur2

    from schemas.topics import TOPIC_POWER, TOPIC_USAGE
    from tests.e2e.faults_helpers import count_rows, produce_raw

    # "First in partition order" orders readings of one partition only: the card that reuses
    # u-1 is one in GA1's partition (murmur2, as kafka-python's default partitioner).
    partitions = int(gpubill.env["GPUBILL_PARTITIONS"])
    assert (murmur2(b"GA3") & 0x7FFFFFFF) % partitions == (murmur2(b"GA1") & 0x7FFFFFFF) % partitions

    lines = [
        _usage_line("u-1", "GA1", "acme"),  # 1: counts
        _usage_line("u-2", "\\ud800", "acme"),  # 2: a key replay cannot encode: dead-lettered by replay
        _usage_line("u-3", "GA2", "acme")[:-1] + ',"tenant":"beta"}',  # 3: a key twice: dead letter
        _usage_line("u-4", "GA2", "../beta"),  # 4: not an id: dead letter
        _usage_line("u-1", "GA3", "beta"),  # 5: u-1 reused for another card: a conflict, recorded
        "not json at all",  # 6: dead-lettered by replay
        _usage_line("u-1", "GA1", "acme"),  # 7: a true duplicate of line 1
        _usage_line("u-1", "GA1", "beta", second=6),  # 8: u-1 reused for another second: a conflict
    ]
    path = tmp_path / "hostile.ndjson"
    path.write_text("\n".join(lines) + "\n")
    replayed = gpubill.run("replay", str(path))
    assert "replayed 6 readings" in replayed.stdout and "2 dead-lettered by replay" in replayed.stdout, replayed.stdout
    assert "line 2 dead-lettered: gpu_uuid: cannot be encoded" in replayed.stderr, replayed.stderr
    produce_raw(broker.bootstrap, [(TOPIC_POWER, b"n1", b"[]"), (TOPIC_USAGE, b"n1", b" [ ] ")])
    gpubill.run("worker", "--drain", timeout=240)

    letters = gpubill.json("dlq", "list", "--format", "json", "--limit", "50")
    reasons = sorted(letter["reason"] for letter in letters)
    assert len(reasons) == 6, reasons
    assert sum(r.startswith("line 2: gpu_uuid: cannot be encoded as the Kafka key") for r in reasons) == 1, reasons
    assert sum(r.startswith("line 6: kind: cannot be read") for r in reasons) == 1, reasons
    assert reasons.count('duplicate key "tenant"') == 1, reasons
    assert sum(r.startswith("tenant: must be an id") for r in reasons) == 1, reasons
    assert sum(r.startswith("empty batch") for r in reasons) == 2, reasons

    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    reused = ("SELECT count() FROM conflicts FINAL WHERE reason = 'event_id reused' AND kept_event_id = 'u-1' "
              "AND conflicting_event_id = 'u-1' AND (gpu_uuid, toUnixTimestamp(second)) IN {keys}")
    assert count_rows(dsn, reused.format(keys="(('GA3', 1772323205), ('GA1', 1772323206))")) == 2
    assert count_rows(dsn, "SELECT count() FROM conflicts FINAL") == 2
    assert count_rows(dsn, "SELECT count() FROM readings_usage FINAL") == 1  # line 1 alone counts
    # no reading billed to "beta" (neither by a repeated key nor by a reused id)
    assert count_rows(dsn, "SELECT count() FROM rated_seconds FINAL WHERE tenant = 'beta'") == 0
