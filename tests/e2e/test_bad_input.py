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
