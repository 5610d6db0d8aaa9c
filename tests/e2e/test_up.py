"""`gpubill up`: worker and scheduler in one process; the scheduler catches up on closed
periods at start-up (it was "down" on the 1st), and SIGTERM stops everything cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import FIXTURES

pytestmark = pytest.mark.e2e


def test_up_consumes_and_the_scheduler_invoices_closed_periods(gpubill):
    gpubill.env["GPUBILL_METRICS_PORT"] = "0"
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
