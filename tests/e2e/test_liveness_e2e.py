"""The liveness check on the real thing (issue 40): `gpubill up` whose feeder hangs after its first
fetch round (the test-only hook GPUBILL_FAULT_STALL_AFTER=1, as the reported aiokafka/Faust
bugs hang: heartbeating, holding its partitions, consuming nothing). With GPUBILL_STALL_S=5 the
stall is logged naming its partitions and lag, exposed on the metrics port, and `up` restarts
its worker in place — the database is not closed, the process is the same — after which every
reading is rated exactly once: as many rows without FINAL as with it (nothing written twice,
what was written before the stall was committed at the clean stop), and the seconds and
millijoules per tenant equal the batch join computed in plain Python (faults_helpers.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.e2e.faults_helpers import (
    committed_total, count_rows, dumps, make_readings, stored_figures, truth_figures, truth_of, wait_until,
    write_ndjson,
)
from tests.ports import free_port

pytestmark = pytest.mark.e2e

SECONDS = 30  # 8 cards: 7 with usage and power, one with power only → 15 readings a second


def scrape(port: int) -> dict[str, float]:
    """The metrics port's samples, 'name{labels}' → value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def log_lines(path) -> list[dict]:
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass  # not a log line of gpubill's (e.g. a banner)
    return lines


def test_a_stalled_worker_is_reported_and_restarted_in_up_and_rates_every_reading_once(gpubill, broker, tmp_path):
    readings = make_readings(SECONDS)
    first, second = readings[: len(readings) // 2], readings[len(readings) // 2:]
    truth = truth_of(readings)
    metrics_port = free_port()
    gpubill.env |= {"GPUBILL_STALL_S": "5", "GPUBILL_FAULT_STALL_AFTER": "1", "GPUBILL_METRICS_PORT": str(metrics_port),
                    "GPUBILL_LOG_FORMAT": "json"}
    gpubill.run("replay", str(write_ndjson(tmp_path / "first.ndjson", [dumps(r) for r in first])))

    log = tmp_path / "up.log"
    with open(log, "w") as sink:
        up = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "up"], env=gpubill.env, cwd=gpubill.cwd,
                              stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        # the first fetch round is rated and committed; what the feeder fetches next it never hands on
        assert wait_until(lambda: up.poll() is not None or committed_total(broker.bootstrap, broker.group) > 0, 60), \
            log.read_text()[-3000:]
        assert up.poll() is None, log.read_text()[-3000:]
        gpubill.run("replay", str(write_ndjson(tmp_path / "second.ndjson", [dumps(r) for r in second])))

        # the stall: one log line naming the partitions, their lag and what the worker waited on
        stalled = lambda: [line for line in log_lines(log) if line.get("msg", "").startswith("the worker is stalled")]
        assert wait_until(lambda: up.poll() is not None or stalled(), 40), log.read_text()[-3000:]
        [stall] = stalled()
        assert stall["waiting_on"] == "kafka" and stall["restart"] is True, stall
        assert stall["lag"] > 0 and stall["stalled_s"] >= 5, stall
        assert set(stall["stalled_partitions"]) <= {f"gpu.{t}.v1:{p}" for t in ("usage", "power") for p in range(4)}
        assert sum(stall["stalled_partitions"].values()) == stall["lag"]

        # restarted in place: the same process, its metrics server still up, counting the stall and the restart
        assert wait_until(lambda: any(line.get("msg") == "restarting the worker after a stall"
                                      for line in log_lines(log)), 30), log.read_text()[-3000:]
        assert up.poll() is None
        assert wait_until(lambda: committed_total(broker.bootstrap, broker.group) == len(readings), 60), \
            log.read_text()[-3000:]
        samples = scrape(metrics_port)
        assert samples['gpubill_worker_stalls_total{waiting_on="kafka"}'] == 1.0, samples
        assert samples["gpubill_worker_restarts_total"] == 1.0
        assert samples["gpubill_worker_stalled"] == 0.0  # the stalled worker is gone; the new one moves
        assert samples["gpubill_worker_stalled_seconds"] == 0.0
        # the restarted worker does not hang (the hook is its first run's only)
        assert sum(1 for line in log_lines(log) if "the feeder hangs" in line.get("msg", "")) == 1
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            up.kill()
            raise
    assert up.returncode == 0, log.read_text()[-3000:]

    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    usage = sum(1 for r in readings if r["kind"] == "usage")
    power = len(readings) - usage
    for table, expected in (("readings_usage", usage), ("readings_power", power)):
        assert count_rows(dsn, f"SELECT count() FROM {table} FINAL") == expected, table
        assert count_rows(dsn, f"SELECT count() FROM {table}") == expected, f"{table}: a row written twice"
    rated = count_rows(dsn, "SELECT count() FROM rated_seconds FINAL")
    assert rated > 0 and count_rows(dsn, "SELECT count() FROM rated_seconds") == rated
    assert stored_figures(dsn) == truth_figures(truth)


def test_a_stalled_gpubill_worker_exits_75_after_committing_what_it_wrote(gpubill, broker, tmp_path):
    """`gpubill worker` (a supervisor restarts it: compose's `restart: unless-stopped`, systemd's
    `Restart=on-failure`) stops cleanly and exits 75, distinct from the crash path's 3; the worker
    started after it (no hook: a new process) rates the rest, every reading once."""
    readings = make_readings(SECONDS)
    first, second = readings[: len(readings) // 2], readings[len(readings) // 2:]
    gpubill.env |= {"GPUBILL_STALL_S": "5", "GPUBILL_FAULT_STALL_AFTER": "1", "GPUBILL_METRICS_PORT": "0"}
    gpubill.run("replay", str(write_ndjson(tmp_path / "first.ndjson", [dumps(r) for r in first])))
    log = tmp_path / "worker.log"
    with open(log, "w") as sink:
        worker = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "worker"], env=gpubill.env, cwd=gpubill.cwd,
                                  stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_until(lambda: worker.poll() is not None or committed_total(broker.bootstrap, broker.group) > 0,
                          60), log.read_text()[-3000:]
        before_stall = committed_total(broker.bootstrap, broker.group)
        gpubill.run("replay", str(write_ndjson(tmp_path / "second.ndjson", [dumps(r) for r in second])))
        assert worker.wait(timeout=60) == 75, log.read_text()[-3000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert "the worker is stalled" in text and "exiting 75 for its supervisor to restart it" in text, text[-3000:]
    # what it wrote is committed, what it fetched and never handed on is not
    assert before_stall <= committed_total(broker.bootstrap, broker.group) < len(readings)

    del gpubill.env["GPUBILL_FAULT_STALL_AFTER"]  # the supervisor's next start: a new process
    assert "drained:" in gpubill.run("worker", "--drain", timeout=120).stdout
    assert committed_total(broker.bootstrap, broker.group) == len(readings)
    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    for table in ("readings_usage", "readings_power", "rated_seconds"):
        assert count_rows(dsn, f"SELECT count() FROM {table}") == count_rows(dsn, f"SELECT count() FROM {table} FINAL")
    assert stored_figures(dsn) == truth_figures(truth_of(readings))
