"""Credit notes and voids as real processes through the gateway (issue 24): two at once never
credit more than the invoice nor take a number twice, and a process killed (-9) between a
credit note's lines and its header is repaired by the next command.

tests/e2e/test_invoice_concurrency.py's database: a fresh embedded chDB behind `gpubill
clickhouse serve`, rated rows written straight into it (tenant t01 rents an A800 at ¥1/s for
30 s of March 2026, unregistered so without trial credit): GB-2026-000001 is rent 30.00,
net 30.00, VAT 1.80, total 31.80.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.test_invoice_concurrency import RULES_DIR, served_database
from tests.unit.test_invoice_lock_runs import PERIOD, seed_tenants
from warehouse.connection import open_database

pytestmark = pytest.mark.e2e


BROKER: dict[str, str] = {}  # the test's broker (the books are on the log, issue 37): set by the fixture below


@pytest.fixture(autouse=True)
def _books_on(broker):
    BROKER.update(GPUBILL_KAFKA=broker.bootstrap, GPUBILL_GROUP=broker.group)
    yield
    BROKER.clear()


def command(dsn: str, tmp_path: Path, *args: str, failpoints: Path | None = None) -> subprocess.Popen:
    env = {**os.environ, **BROKER, "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(RULES_DIR),
           "GPUBILL_HOME": str(tmp_path / "var"), "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1", "COLUMNS": "200"}
    if failpoints:
        env["GPUBILL_FAILPOINTS"] = str(failpoints)
    return subprocess.Popen([sys.executable, "-m", "gpubill.cli", *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def outcome(process: subprocess.Popen, timeout_s: float = 180) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=timeout_s)
    return process.returncode, stdout, stderr


def invoiced(dsn: str, tmp_path: Path) -> None:
    with open_database(dsn) as db:
        seed_tenants(db, {"t01": 30})
    code, stdout, stderr = outcome(command(dsn, tmp_path, "invoice", "run", "--period", PERIOD, "--offline"))  # no corrections
    assert code == 0 and "1 invoice created" in stdout, (stdout, stderr)


def credit(dsn: str, tmp_path: Path, amount: str, failpoints: Path | None = None) -> subprocess.Popen:
    return command(dsn, tmp_path, "credit-note", "create", "--invoice", "GB-2026-000001", "--reason", "duplicate",
                   "--line", f"1={amount}", "--json", failpoints=failpoints)


def notes(db) -> list[tuple[str, Decimal]]:
    return [(n, Decimal(t)) for n, t in db.query("SELECT number, total FROM credit_notes FINAL ORDER BY number")]


def test_two_credit_notes_at_once_never_credit_more_than_the_invoice(tmp_path):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    with served_database(tmp_path) as dsn:
        invoiced(dsn, tmp_path)
        (failpoints / "credit-note-header").write_text("1.5")  # the first holds the lease ≥ 1.5 s: they overlap
        results = [outcome(p) for p in [credit(dsn, tmp_path, "20.00", failpoints),
                                        credit(dsn, tmp_path, "20.00", failpoints)]]
        with open_database(dsn) as db:
            stored = notes(db)
    made = [json.loads(out)[0] for code, out, _ in results if code == 0]
    refused = [err for code, _, err in results if code == 1]
    # one credited 20.00 (+ VAT 1.20); the other waited its turn and found 10.00 left
    assert [(m["number"], m["total"]) for m in made] == [(stored[0][0], "21.20")] and len(stored) == 1, results
    assert len(refused) == 1 and "can take at most 10.00 more" in refused[0], results
    assert stored[0][0].endswith("-000001")


def test_a_void_and_a_credit_note_at_once_credit_the_invoice_once_in_full(tmp_path):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    with served_database(tmp_path) as dsn:
        invoiced(dsn, tmp_path)
        (failpoints / "credit-note-header").write_text("1.5")
        processes = [credit(dsn, tmp_path, "20.00", failpoints),
                     command(dsn, tmp_path, "invoice", "void", "GB-2026-000001", "--reason", "duplicate invoice",
                             failpoints=failpoints)]
        results = [outcome(p) for p in processes]
        with open_database(dsn) as db:
            stored = notes(db)
            status = db.query("SELECT status FROM invoices FINAL WHERE number = 'GB-2026-000001'")[0][0]
    assert results[1][0] == 0 and status == "voided", results
    # whichever went first, the notes credit exactly the invoice's 31.80: the credit note's
    # 21.20 then the void's 10.00 + VAT round(1.80) − 1.20 = 10.60, or the void's 31.80 alone
    # (then the credit note is refused: the invoice is voided)
    assert sum(total for _, total in stored) == Decimal("31.80"), (stored, results)
    assert [n[-6:] for n, _ in stored] == [f"{i:06d}" for i in range(1, len(stored) + 1)]  # gap-free
    if len(stored) == 1:
        assert results[0][0] == 1 and "already voided" in results[0][2], results


def test_a_credit_note_killed_before_it_is_recorded_leaves_nothing_and_its_number_is_issued_next(tmp_path):
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    with served_database(tmp_path) as dsn:
        invoiced(dsn, tmp_path)
        (failpoints / "credit-note-header").write_text("600")
        killed = credit(dsn, tmp_path, "7.00", failpoints)
        deadline = time.monotonic() + 120
        while not (failpoints / "credit-note-header.reached").exists():
            assert killed.poll() is None and time.monotonic() < deadline, killed.communicate()
            time.sleep(0.1)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=30)
        (failpoints / "credit-note-header").unlink()
        with open_database(dsn) as db:
            # killed before its fact was appended (issue 37): not a line, not a header — it never existed
            assert db.query("SELECT count() FROM credit_note_lines")[0][0] == 0
            assert notes(db) == []
            assert db.query("SELECT count() FROM v_credit_note_lines")[0][0] == 0

        started = time.monotonic()
        code, out, err = outcome(credit(dsn, tmp_path, "30.00"))  # all 30.00 is still creditable
        assert code == 0, (out, err)
        assert time.monotonic() - started < 60  # the killed holder ran here: its lease is broken at once
        made = json.loads(out)[0]
        with open_database(dsn) as db:
            # the number the killed process would have taken is the next one's (gap-free)
            assert notes(db) == [(made["number"], Decimal("31.80"))] and made["number"].endswith("-000001")
            assert [row[0] for row in db.query("SELECT amount FROM credit_note_lines")] == [Decimal("30.00")]
