"""A full disk (issue 40, part 6): the database on a small tmpfs that fills during a drain.

The worker stops at once with one line naming the database's directory and what to do
(reason disk-full, exit 3), commits nothing it did not write, and a drain after the tmpfs
is made larger (`mount -o remount,size=…`: space freed) finishes with every second billed
once — the fault suite's figures (tests/e2e/faults_helpers.py), to the fen.

The size: the schema is created first on a roomy tmpfs and measured (2,052 KiB), then the
tmpfs shrinks to that plus FREE_KIB. ClickHouse reserves a part's uncompressed size before it
writes it (chDB 26.9 answers NOT_ENOUGH_SPACE when it cannot): measured with these 120,000
readings in 8 batches, 3 MiB free stops the drain at its first batch's rated seconds; 5 MiB and
8 MiB let it finish (≈ 2 MiB stored). So the disk is full at the drain's first write here.

Needs root (mount); skipped otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.e2e.faults_helpers import (
    committed_total,
    count_rows,
    dumps,
    make_readings,
    truth_of,
    write_ndjson,
)
from tests.e2e.test_faults import assert_billed_exactly
from tests.tmpfs import tmpfs

pytestmark = pytest.mark.e2e

FREE_KIB = 3072  # less than a batch of 120,000 readings reserves (see the module docstring)
TABLES = ("rated_seconds", "readings_usage", "readings_power", "conflicts", "deadletters")


def remount(path: Path, size_kib: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(path)], check=True, capture_output=True)


def used_kib(path: Path) -> int:
    stats = os.statvfs(path)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize // 1024


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs at tmp_path/db (64 MiB until the test shrinks it), unmounted afterwards."""
    with tmpfs(tmp_path / "db", "64m") as disk:
        yield disk


def test_a_disk_that_fills_during_a_drain(gpubill, broker, small_disk, tmp_path):
    database = small_disk / "clickhouse"
    gpubill.env["GPUBILL_CLICKHOUSE"] = dsn = f"chdb://{database}"
    assert "nothing to drain" in gpubill.run("worker", "--drain").stdout  # the schema, on the roomy disk
    schema_kib = used_kib(small_disk)
    remount(small_disk, schema_kib + FREE_KIB)
    print(f"schema {schema_kib} KiB; tmpfs now {schema_kib + FREE_KIB} KiB")

    readings = make_readings(8000)  # 15 readings a second of 8 cards: 120,000 readings
    truth = truth_of(readings)
    gpubill.run("replay", str(write_ndjson(tmp_path / "readings.ndjson", [dumps(r) for r in readings])))

    full = gpubill.run("worker", "--drain", check=False, timeout=120)
    print(f"the drain exited {full.returncode} with {used_kib(small_disk)} KiB used: {full.stdout.strip()}")
    assert full.returncode == 3, full.stdout + full.stderr
    said = [line for line in full.stderr.splitlines() if "disk-full" in line]
    assert len(said) == 1, full.stderr
    crash = json.loads(said[0])  # one JSON object (gpubill/logs.py)
    assert f"free space on {database}, then restart the worker" in said[0], crash
    assert "retrying" not in full.stderr  # stopped at once, not after minutes of backoff
    committed = committed_total(broker.bootstrap, broker.group)
    assert committed < len(readings)
    print(f"stopped with {committed} of {len(readings)} readings committed")

    remount(small_disk, 64 * 1024)  # space freed
    # nothing committed that was not written: every committed reading is stored
    stored = (count_rows(dsn, "SELECT count() FROM readings_usage FINAL")
              + count_rows(dsn, "SELECT count() FROM readings_power FINAL"))
    assert stored >= committed
    done = gpubill.run("worker", "--drain", timeout=240)
    assert "drained:" in done.stdout, done.stdout
    assert committed_total(broker.bootstrap, broker.group) == len(readings)
    for table in TABLES[1:]:  # nothing doubled, not even as parts waiting for a merge
        once = count_rows(dsn, f"SELECT count() FROM {table} FINAL")
        assert count_rows(dsn, f"SELECT count() FROM {table}") == once, table
    # rated seconds are rewritten by design as a later batch completes them (a higher version: an
    # energy row joined with its usage), so FINAL folds versions; none is stored twice
    versions = count_rows(dsn, "SELECT count() FROM (SELECT DISTINCT stream, gpu_uuid, second, version "
                               "FROM rated_seconds)")
    assert count_rows(dsn, "SELECT count() FROM rated_seconds") == versions
    assert count_rows(dsn, "SELECT count() FROM readings_usage FINAL") + count_rows(
        dsn, "SELECT count() FROM readings_power FINAL") == len(readings)
    assert_billed_exactly(gpubill, truth)
