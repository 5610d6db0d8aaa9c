"""`gpubill up`: worker and scheduler in one process; the scheduler catches up on closed
periods at start-up (it was "down" on the 1st), and SIGTERM stops everything cleanly."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.e2e.conftest import FIXTURES

pytestmark = pytest.mark.e2e


def test_up_consumes_and_the_scheduler_invoices_closed_periods(gpubill):
    with socket.socket() as probe:  # a free port for the worker's Prometheus endpoint
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    gpubill.env["GPUBILL_METRICS_PORT"] = str(port)
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))
    gpubill.run("worker", "--drain")  # the data is in before the scheduler's start-up run

    up = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "up"], env=gpubill.env, cwd=gpubill.cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        log = []
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            log.append(line)
            if "billing run 2026-04" in line:
                break
        else:
            pytest.fail("the scheduler did not invoice 2026-04 within 90 s:\n" + "".join(log))
        # the worker serves its metrics; the drained readings were already committed, so the
        # lag of every partition is 0 once reported (every 5 s)
        time.sleep(6)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        for name in ("gpubill_readings_in_total", "gpubill_deadletters_total", "gpubill_flush_seconds",
                     "gpubill_consumer_lag", "gpubill_dedupe_state_entries", "gpubill_dedupe_state_bytes"):
            assert name in metrics, name
        lags = [line for line in metrics.splitlines() if line.startswith("gpubill_consumer_lag{")]
        assert lags and all(line.endswith(" 0.0") for line in lags), lags
        # while `up` holds the embedded database, other commands are told so
        busy = gpubill.run("invoice", "show", "--period", "2026-03", "--tenant", "acme", check=False)
        assert busy.returncode == 1 and "is in use by pid" in busy.stderr
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=60)
    assert up.returncode == 0, "".join(log) + rest

    numbers = [gpubill.json("invoice", "show", "--period", p, "--tenant", t, "--format", "json")["number"]
               for p in ("2026-03", "2026-04") for t in ("acme", "beta")]
    assert numbers == ["GB-2026-000001", "GB-2026-000002", "GB-2026-000003", "GB-2026-000004"]
