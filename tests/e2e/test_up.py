"""`gpubill up`: worker and scheduler in one process; the scheduler catches up on closed
periods at start-up (it was "down" on the 1st), and SIGTERM stops everything cleanly. It
serves its embedded database to every other command (issue 36, item 5): `RunningUp` starts
one and hands its finance URL to checks that need it."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.e2e.conftest import FIXTURES, Gpubill
from tests.e2e.test_jdbc_gateway import jdbc, run_check  # noqa: F401 - the driver's fixture
from tests.ports import free_port

pytestmark = pytest.mark.e2e


# ------------------------------------------------------------------- up serves its database


@dataclass
class RunningUp:
    """A `gpubill up` serving its database: its process, pid, log file and the URL finance tools use."""

    process: subprocess.Popen
    log: Path
    database_url: str  # http://127.0.0.1:PORT/ (where; the users' passwords are in the record)
    finance_url: str  # http://finance:PASSWORD@127.0.0.1:PORT/ as `gpubill status --finance-url` prints it

    @property
    def pid(self) -> int:
        return self.process.pid


@contextmanager
def running_up(gpubill: Gpubill, ready_when: str, wait_s: float = 120):
    """`gpubill up` with its database served on a free port, yielded once its log says `ready_when`
    and `gpubill status` reports it; stopped with SIGTERM after (exit 0 checked)."""
    port = free_port()
    gpubill.env["GPUBILL_GATEWAY_PORT"] = str(port)
    log = gpubill.cwd / "up.log"
    with open(log, "w") as sink:  # a file, not a pipe: up's log lines never wait for a reader
        process = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "up"], env=gpubill.env, cwd=gpubill.cwd,
                                   stdout=sink, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + wait_s
        while ready_when not in log.read_text():
            assert process.poll() is None, f"gpubill up exited {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"gpubill up not ready within {wait_s:.0f} s:\n{log.read_text()}"
            time.sleep(0.2)
        status = gpubill.json("status", "--json")
        assert status["up"]["running"] and status["up"]["pid"] == process.pid, status
        assert status["database"]["served_on"] == f"http://127.0.0.1:{port}/", status
        finance_url = gpubill.run("status", "--finance-url").stdout.strip()
        yield RunningUp(process, log, f"http://127.0.0.1:{port}/", finance_url)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, log.read_text()


def finance_query(url: str, sql: str) -> str:
    """One query as a finance tool sends it: the pasted URL, its user and password sent as HTTP Basic."""
    parts = urllib.parse.urlsplit(url)
    request = urllib.request.Request(f"http://{parts.hostname}:{parts.port}/?" + urllib.parse.urlencode({"query": sql}))
    pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password)}"
    request.add_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read().decode()


def test_up_invoices_closed_periods_and_serves_its_database_to_every_other_command(gpubill, jdbc):  # noqa: F811
    """One `up` for all of it (each start costs seconds): the scheduler catches up on closed
    periods at start, the worker serves its metrics, and — issue 36 — the database `up` holds
    is every other command's, through its gateway, with no setting."""
    metrics_port = free_port()
    gpubill.env["GPUBILL_METRICS_PORT"] = str(metrics_port)
    assert gpubill.env["GPUBILL_CLICKHOUSE"].startswith("chdb://")  # the test's embedded default, nothing more
    gpubill.run("replay", str(FIXTURES / "readings_part1.ndjson"))
    gpubill.run("replay", str(FIXTURES / "readings_part2.ndjson"))
    gpubill.run("worker", "--drain")  # the data is in before the scheduler's start-up run
    with running_up(gpubill, ready_when="billing run 2026-04") as up:
        # the worker serves its metrics; the drained readings were already committed, so the
        # lag of every partition is 0 once reported (every 5 s)
        deadline = time.monotonic() + 30
        while True:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            lags = [line for line in metrics.splitlines() if line.startswith("gpubill_consumer_lag{")]
            if lags or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for name in ("gpubill_readings_in_total", "gpubill_deadletters_total", "gpubill_flush_seconds",
                     "gpubill_consumer_lag", "gpubill_dedupe_state_entries", "gpubill_dedupe_state_bytes"):
            assert name in metrics, name
        assert lags and all(line.endswith(" 0.0") for line in lags), lags

        # before (8f7af92): with `up` running, each command below waited 5 s and failed "is in use by pid …"
        # the URL for finance tools is pasteable: a plain HTTP client with it reads the invoices
        assert up.finance_url.startswith("http://finance:") and "***" not in up.finance_url
        assert finance_query(up.finance_url, "SELECT count() FROM invoices FINAL WHERE period = '2026-03'") == "2\n"
        # the official JDBC driver, as a BI tool uses it, on the same pasted URL: connect, metadata,
        # prepared statements and every query of docs/finance.md (tests/e2e/test_jdbc_gateway.py)
        steps = run_check(jdbc, SimpleNamespace(finance_dsn=up.finance_url), gpubill.cwd)
        assert steps and not {name: seen for name, (status, seen) in steps.items() if status != "OK"}, steps
        # its prepared statement's answer is what a plain HTTP client reads with the same URL
        issued = finance_query(up.finance_url, "SELECT count(), sum(total) FROM v_invoices WHERE period >= '2026-01' "
                                               "AND status = 'issued' AND revision >= 1").split()
        assert int(issued[0]) >= 2 and steps["prepared"][1] == f"1 rows, columns 2, first n={issued[0]}|total={issued[1]}"

        listed = gpubill.json("invoice", "list", "--period", "2026-03", "--json")
        assert [(row["number"], row["tenant"]) for row in listed] == [("GB-2026-000001", "acme"),
                                                                       ("GB-2026-000002", "beta")]
        rerun = gpubill.run("invoice", "run", "--period", "2026-03").stdout
        assert rerun.splitlines()[0] == "2026-03: 0 invoices created, 2 already final"
        gpubill.run("tenant", "add", "acme", "--name", "Acme")
        key = gpubill.run("key", "create", "--tenant", "acme").stdout
        assert key.startswith("gpb_")
        charged = max(listed, key=lambda row: Decimal(row["total"]))
        assert Decimal(charged["total"]) > 0, listed
        note = gpubill.json("credit-note", "create", "--invoice", charged["number"], "--reason", "goodwill", "--all",
                            "--json")[0]
        assert note["number"].startswith("CN-") and note["invoice"] == charged["number"]
        dry = gpubill.run("rerate", "--period", "2026-03", "--dry-run")
        assert dry.returncode == 0

        status = gpubill.json("status", "--json")
        assert status["broker"]["reachable"] is True
        assert status["worker"]["lag"] == 0  # drained before up started; up committed nothing new
        assert status["last_invoice_run"]["period"] == "2026-03"  # the rerun above, after the scheduler's 2026-04
        assert status["drafts_waiting"] == 0
        # the books (issue 37): up took them into its database; the runs above appended and projected facts
        assert status["books"]["projected_to"] > 0 and status["books"]["halted"] == "", status
        assert "finance:***@" in status["database"]["finance_url"]  # masked unless asked for

        # a second up: one line, at once, naming the first — not a port conflict
        started = time.monotonic()
        second = gpubill.run("up", check=False, timeout=60)
        assert second.returncode == 1
        assert second.stderr.strip().splitlines() == [
            f"error: gpubill up is already running (pid {up.pid}), serving its database on {up.database_url}"]
        assert time.monotonic() - started < 20

    record = Path(gpubill.env["GPUBILL_CLICKHOUSE"][len("chdb://"):] + ".served")
    assert not record.exists()  # withdrawn at the stop
    numbers = [gpubill.json("invoice", "show", "--period", p, "--tenant", t, "--format", "json")["number"]
               for p in ("2026-03", "2026-04") for t in ("acme", "beta")]  # the database opened directly again
    assert numbers == ["GB-2026-000001", "GB-2026-000002", "GB-2026-000003", "GB-2026-000004"]
    assert gpubill.json("status", "--json")["up"] == {"running": False}
