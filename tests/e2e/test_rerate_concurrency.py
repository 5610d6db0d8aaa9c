"""`gpubill rerate --apply` as real processes through the gateway (issue 25): killed (-9) at each
step, then run again, nothing is issued or credited twice and both number series stay gap-free;
racing an invoice run, the two take turns under the invoicing lease.

tests/e2e/test_invoice_concurrency.py's database (a fresh embedded chDB behind `gpubill clickhouse
serve`) with tests/unit/test_invoice_lock_runs.py's rated rows: tenant tNN rents an A800 at ¥1/s
for N seconds of its own hour of March 2026, unregistered (no trial credit), VAT 6 %. The
correction (tests/unit/test_rerate_preview.py): ¥0.5/s from the start of March, so every
invoice changes: 30 s → 15.00 + 0.90 = 15.90; 20 s → 10.00 + 0.60 = 10.60; 8 s → 4.00 + 0.24 = 4.24.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.test_invoice_concurrency import served_database
from tests.unit.test_invoice_lock_runs import PERIOD, seed_tenants
from tests.unit.test_rerate_preview import corrected_rules
from warehouse.connection import open_database

pytestmark = pytest.mark.e2e

ORIGINAL_RULES = Path(__file__).parent / "rules"
NEW = {"t01": Decimal("15.90"), "t02": Decimal("10.60"), "t03": Decimal("4.24")}


@pytest.fixture(autouse=True)
def kafka(broker, monkeypatch):
    """rerate takes the log of corrections to its end first (issue 36): an empty one, on a real broker."""
    monkeypatch.setenv("GPUBILL_KAFKA", broker.bootstrap)


def command(dsn: str, tmp_path: Path, rules: Path, *args: str, failpoints: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(rules),
           "GPUBILL_HOME": str(tmp_path / "var"), "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1", "COLUMNS": "200"}
    if failpoints:
        env["GPUBILL_FAILPOINTS"] = str(failpoints)
    return subprocess.Popen([sys.executable, "-m", "gpubill.cli", *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen, timeout_s: float = 240) -> str:
    stdout, stderr = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, f"exited {process.returncode}\n{stdout}\n{stderr}"
    return stdout + stderr


def apply(dsn: str, tmp_path: Path, rules: Path, failpoints: Path | None = None) -> subprocess.Popen:
    return command(dsn, tmp_path, rules, "rerate", "--period", PERIOD, "--apply", failpoints=failpoints)


def reached(process: subprocess.Popen, failpoints: Path, name: str) -> None:
    """Wait until `process` is paused at the failpoint `name` (usage/failpoints.py)."""
    deadline = time.monotonic() + 180
    while not (failpoints / f"{name}.reached").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"never reached {name}"
        time.sleep(0.05)


def kill_at(process: subprocess.Popen, failpoints: Path, name: str) -> None:
    reached(process, failpoints, name)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    (failpoints / name).unlink()


def documents(dsn: str) -> dict:
    with open_database(dsn) as db:
        invoices = db.query("SELECT number, tenant, status, total, replaces FROM invoices FINAL WHERE number != '' "
                            "ORDER BY number")
        notes = db.query("SELECT number, invoice, reason, total FROM credit_notes FINAL ORDER BY number")
    return {"invoices": [tuple(r) for r in invoices], "notes": [tuple(r) for r in notes]}


def assert_corrected_once(stored: dict, tenants: dict[str, Decimal]) -> None:
    """Every original voided with one credit note in full, one replacement each, both series gap-free."""
    numbers = [n for n, *_ in stored["invoices"]]
    assert numbers == [f"GB-2026-{i:06d}" for i in range(1, len(numbers) + 1)], stored
    notes = [n for n, *_ in stored["notes"]]
    assert notes == [f"{notes[0][:-6]}{i:06d}" for i in range(1, len(notes) + 1)], stored
    standing = {t: (total, replaces) for _, t, status, total, replaces in stored["invoices"] if status == "issued"}
    assert {t: total for t, (total, _) in standing.items()} == tenants, stored
    voided = {n: total for n, _, status, total, _ in stored["invoices"] if status == "voided"}
    assert {invoice: total for _, invoice, reason, total in stored["notes"] if reason == "rerate"} == voided, stored
    assert sorted(r for _, (_, r) in standing.items() if r) == sorted(voided), stored


@pytest.mark.parametrize("failpoint", ["rerate-publish", "credit-note-header", "rerate-documents"])
def test_an_apply_killed_anywhere_is_finished_by_the_next_and_nothing_is_issued_twice(tmp_path, failpoint):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    corrected_rules(tmp_path, "2026-03-01")
    rules_dir = tmp_path / "rules"
    with served_database(tmp_path) as dsn:
        with open_database(dsn) as db:
            seed_tenants(db, {"t01": 30, "t02": 20})
        finished(command(dsn, tmp_path, ORIGINAL_RULES, "invoice", "run", "--period", PERIOD))
        (failpoints / failpoint).write_text("600")
        kill_at(apply(dsn, tmp_path, rules_dir, failpoints), failpoints, failpoint)
        finished(apply(dsn, tmp_path, rules_dir))
        stored = documents(dsn)
        again = finished(apply(dsn, tmp_path, rules_dir))
        assert documents(dsn) == stored and "no document changed" in again
    assert_corrected_once(stored, {"t01": NEW["t01"], "t02": NEW["t02"]})
    assert len(stored["invoices"]) == 4 and len(stored["notes"]) == 2


def test_an_apply_racing_an_invoice_run_takes_turns_and_a_new_tenant_is_invoiced_once(tmp_path):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    corrected_rules(tmp_path, "2026-03-01")
    rules_dir = tmp_path / "rules"
    with served_database(tmp_path) as dsn:
        with open_database(dsn) as db:
            seed_tenants(db, {"t01": 30, "t02": 20})
        finished(command(dsn, tmp_path, ORIGINAL_RULES, "invoice", "run", "--period", PERIOD))
        with open_database(dsn) as db:
            seed_tenants(db, {"t03": 8}, period=PERIOD)  # t03: usage, no invoice yet
        # The apply holds the lease at rerate-publish until the invoice run has seen it and waits
        # (its failpoint invoice-lease-wait, armed for no time, only says so): they overlap.
        (failpoints / "rerate-publish").write_text("180")
        (failpoints / "invoice-lease-wait").write_text("0")
        racing = [apply(dsn, tmp_path, rules_dir, failpoints)]
        reached(racing[0], failpoints, "rerate-publish")
        racing.append(command(dsn, tmp_path, rules_dir, "invoice", "run", "--period", PERIOD,
                              failpoints=failpoints))
        reached(racing[1], failpoints, "invoice-lease-wait")
        (failpoints / "rerate-publish").unlink()  # the apply goes on, the invoice run has its turn after
        outputs = [finished(p) for p in racing]
        stored = documents(dsn)
    assert "waiting for another invoice run to finish" in outputs[1], outputs
    assert_corrected_once(stored, NEW)
    t03 = [row for row in stored["invoices"] if row[1] == "t03"]
    assert len(t03) == 1 and t03[0][2] == "issued", stored
