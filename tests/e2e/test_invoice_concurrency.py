"""Invoice runs as real processes through the gateway, on the real broker's books: two at once,
and one killed (-9) just before an invoice is recorded on the books (issue 37: the fact is the
commit point, so nothing of that invoice exists).

The database is a fresh embedded chDB served by `gpubill clickhouse serve`; the rated rows
are written straight into it (tests/unit/test_invoice_lock_runs.py's seed: tenant tNN rents
one A800 at ¥1/s for SECONDS[tNN] seconds of March 2026), and `gpubill invoice run` is run
as the user runs it. Whatever the interleaving, every tenant gets exactly one invoice,
numbered GB-2026-000001 … without gaps, and no line is left without its header.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from tests.unit.test_invoice_lock_runs import PERIOD, SECONDS, assert_invoiced_once_gap_free, seed_tenants
from warehouse.connection import open_database

pytestmark = pytest.mark.e2e

RULES_DIR = Path(__file__).parent / "rules"
TENANTS = {**SECONDS, "t06": 45, "t07": 9, "t08": 300}


@contextmanager
def served_database(directory: Path) -> Iterator[str]:
    """The DSN of a fresh embedded database behind `gpubill clickhouse serve`. The one place
    that starts the gateway: it uses the gateway tests' own helpers, so that when the
    gateway asks for credentials, only this function (and those helpers) change."""
    from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway

    port = free_port()
    gateway = start_gateway(directory, port)
    try:
        # a gateway with users hands out its DSN (password included); one without is plain
        yield getattr(gateway, "dsn", f"http://127.0.0.1:{port}/")
    finally:
        stop_gateway(gateway)


def invoice_run(dsn: str, tmp_path: Path, broker, failpoints: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(RULES_DIR), "GPUBILL_KAFKA": broker.bootstrap,
           "GPUBILL_GROUP": broker.group,
           "GPUBILL_HOME": str(tmp_path / "var"), "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1", "COLUMNS": "200"}
    if failpoints:
        env["GPUBILL_FAILPOINTS"] = str(failpoints)
    # --offline: no corrections on this log; the runs' turns at the lease and the books are what is tested
    return subprocess.Popen([sys.executable, "-m", "gpubill.cli", "invoice", "run", "--period", PERIOD, "--offline"],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen, timeout_s: float = 180) -> tuple[str, str]:
    stdout, stderr = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, f"invoice run exited {process.returncode}\n{stdout}\n{stderr}"
    return stdout, stderr


def test_two_runs_at_once_invoice_every_tenant_once_numbered_without_gaps(tmp_path, broker):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    # each header waits 0.5 s: the first run holds the lease for ≥ 4 s, so the runs overlap
    (failpoints / "invoice-header").write_text("0.5")
    with served_database(tmp_path) as dsn:
        with open_database(dsn) as db:
            seed_tenants(db, TENANTS)
        runs = [invoice_run(dsn, tmp_path, broker, failpoints), invoice_run(dsn, tmp_path, broker, failpoints)]
        outputs = [finished(run) for run in runs]
        with open_database(dsn) as db:
            assert_invoiced_once_gap_free(db, TENANTS)
    summaries = sorted(stdout.splitlines()[0] for stdout, _ in outputs)
    # one run invoiced everyone; the other waited its turn and found every invoice final
    assert summaries == [f"{PERIOD}: 0 invoices created, {len(TENANTS)} already final",
                         f"{PERIOD}: {len(TENANTS)} invoices created, 0 already final"], outputs
    waited = [stderr for stdout, stderr in outputs if " 0 invoices created" in stdout]
    assert "waiting for another invoice run to finish" in waited[0], outputs


def test_a_run_killed_before_an_invoice_is_recorded_leaves_nothing_of_it(tmp_path, broker):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    (failpoints / "invoice-header").write_text("600")  # the first invoice waits before its append: kill it there
    with served_database(tmp_path) as dsn, open_database(dsn) as db:
        seed_tenants(db, TENANTS)
        killed = invoice_run(dsn, tmp_path, broker, failpoints)
        deadline = time.monotonic() + 120
        while not (failpoints / "invoice-header.reached").exists():
            assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()
            time.sleep(0.1)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        (failpoints / "invoice-header").unlink()
        # nothing of t01's invoice: not a line, not a header (it was never on the books); the lease is held
        assert db.query("SELECT count() FROM invoice_lines")[0][0] == 0
        assert db.query("SELECT count() FROM invoices")[0][0] == 0
        assert db.query("SELECT state FROM invoice_locks") == [("claimed",)]

        started = time.monotonic()
        stdout, _ = finished(invoice_run(dsn, tmp_path, broker))
        # the killed holder ran on this machine: its lease is broken at once, not after 300 s
        assert time.monotonic() - started < 60
        assert stdout.splitlines()[0] == f"{PERIOD}: {len(TENANTS)} invoices created, 0 already final"
        assert_invoiced_once_gap_free(db, TENANTS)
