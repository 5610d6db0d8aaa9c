"""`gpubill db migrate`: applies the schema migrations once, names them, and is idempotent.

Run as a child process, as a user runs it (chDB allows one engine per process, and the
database here is the child's, in its own tmp directory).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import schemas

SHIPPED = sorted(path.name for path in (Path(schemas.__file__).parent / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql"))


def migrate(dsn: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpubill.cli", "db", "migrate"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "GPUBILL_CLICKHOUSE": dsn, "NO_COLOR": "1", "COLUMNS": "300"}, cwd=cwd,
    )


def test_the_first_run_applies_and_names_every_migration_the_second_finds_the_schema_up_to_date(tmp_path):
    assert len(SHIPPED) >= 6  # 0001_init.sql … 0006_fewer_merges.sql at the time of writing
    where = f"chdb://{tmp_path.resolve()}/ch"
    dsn = f"chdb://{tmp_path}/ch"

    first = migrate(dsn, tmp_path)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == f"applied {len(SHIPPED)} migrations to {where}:"
    assert [line.strip() for line in lines[1:]] == SHIPPED  # each by name, in order

    second = migrate(dsn, tmp_path)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        f"schema up to date at {where}: all {len(SHIPPED)} migrations applied, the latest {SHIPPED[-1]}"]


@pytest.mark.parametrize("dsn, fragment", [
    ("ftp://x", "unsupported DSN 'ftp://x'"),
    ("http://gpubill:secret@127.0.0.1:1/gpubill", "cannot open ClickHouse at http://gpubill:***@127.0.0.1:1/gpubill"),
])
def test_a_bad_dsn_is_one_line_on_stderr_and_exit_1(tmp_path, dsn, fragment):
    done = migrate(dsn, tmp_path)
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], done.stderr
    assert "secret" not in done.stderr and done.stdout == ""


def test_an_embedded_database_in_use_by_another_process_is_refused_in_one_line(tmp_path):
    with open(tmp_path / "ch.lock", "w") as lock:  # what a running `gpubill up` holds
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("pid 4242 (gpubill up)")
        lock.flush()
        done = migrate(f"chdb://{tmp_path}/ch", tmp_path)
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "in use by pid 4242 (gpubill up)" in lines[0], done.stderr
    assert not (tmp_path / "ch").exists()  # nothing was created or migrated


def test_a_copy_of_the_tests_template_is_a_fresh_migration_of_its_own(tmp_path):
    # tests/chdb.py: the unit tests' databases are copies of one migrated template
    from tests.chdb_template import migrated_dsn
    from warehouse.connection import open_database

    schema = ("SELECT table, name, type, default_expression FROM system.columns "
              "WHERE database = currentDatabase() ORDER BY table, position")
    engines = "SELECT name, engine FROM system.tables WHERE database = currentDatabase() ORDER BY name"
    with open_database(f"chdb://{tmp_path / 'fresh'}") as fresh:
        expected = (fresh.query(schema), fresh.query(engines), fresh.query("SELECT name FROM schema_migrations ORDER BY name"))
    copy = migrated_dsn(tmp_path / "copy")
    with open_database(copy) as database:
        assert database.migrate() == []  # nothing left to apply
        assert (database.query(schema), database.query(engines),
                database.query("SELECT name FROM schema_migrations ORDER BY name")) == expected
        database.insert("tenants", [("t1", "T1", "active", datetime(2026, 1, 1), datetime(2026, 1, 1), "")],
                        ["tenant", "display_name", "status", "created_at", "updated_at", "note"])
    with open_database(migrated_dsn(tmp_path / "another")) as other:
        assert other.query("SELECT count() FROM tenants") == [(0,)]  # copies share nothing


def test_the_lock_message_names_the_real_ways_out(tmp_path, monkeypatch):
    # before: it said "run this command inside `gpubill up`" (impossible) and never named clickhouse serve
    monkeypatch.setenv("GPUBILL_DB_LOCK_WAIT_S", "0.2")
    with open(tmp_path / "ch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write("pid 4242 (gpubill up)")
        lock.flush()
        done = migrate(f"chdb://{tmp_path}/ch", tmp_path)
    line = done.stderr.strip()
    assert "gpubill clickhouse serve" in line and "GPUBILL_CLICKHOUSE" in line and "waited 0.2 s" in line
    assert "inside `gpubill up`" not in line


def test_a_command_waits_a_moment_for_a_database_another_command_is_about_to_release(tmp_path):
    # before: a second command failed at once while another short one still held the database
    import threading

    lock = open(tmp_path / "ch.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write("pid 4242 (gpubill invoice show)")
    lock.flush()
    release = threading.Timer(1.0, lock.close)  # closing the file releases the lock
    release.start()
    try:
        done = migrate(f"chdb://{tmp_path}/ch", tmp_path)  # the default wait is 5 s
    finally:
        release.join()
    assert done.returncode == 0, done.stderr


def test_0020_turns_the_invoices_of_0002_into_issued_invoices_and_drops_the_stray_lines(tmp_path):
    """A database invoiced before the lifecycle (issue 24): its invoices become issued ones whose
    id is their number, their lines revision 1, a line without a header (a crash) is not copied."""
    from decimal import Decimal

    from billing import invoice_store
    from warehouse import migrations
    from warehouse.connection import open_database

    with open_database(f"chdb://{tmp_path / 'ch'}", migrate=False) as db:
        db.command("CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, "
                   "applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = ReplacingMergeTree ORDER BY version")
        for version, name, sql in migrations.migrations():
            if version < 20:
                for statement in migrations.split_statements(sql):
                    db.command(statement)
                db.command("INSERT INTO schema_migrations (version, name) SELECT {v:UInt32}, {n:String}",
                           {"v": version, "n": name})
        issued = datetime(2026, 4, 3, 2, 0)
        db.insert("invoices", [("GB-2026-000001", 2026, 1, "acme", "2026-03", "finalized", issued, "CNY", Decimal("12"),
                                Decimal("2"), Decimal("10"), Decimal("0.60"), Decimal("10.60"), Decimal("0.06"))],
                  ["number", "year", "seq", "tenant", "period", "status", "issued_at", "currency", "subtotal",
                   "credit_used", "net", "tax", "total", "vat_rate"])
        columns = ["number", "tenant", "period", "line_no", "kind", "description", "quantity", "unit", "unit_price",
                   "amount", "exact_amount"]
        db.insert("invoice_lines", [
            ("GB-2026-000001", "acme", "2026-03", 1, "rent", "A800", Decimal(1), "GPU-hour", Decimal(12), Decimal(12), "12"),
            ("GB-2026-000001", "acme", "2026-03", 2, "credit", "trial", Decimal(1), "", Decimal(-2), Decimal(-2), "-2"),
            ("GB-2026-000002", "beta", "2026-03", 1, "rent", "crashed", Decimal(1), "", Decimal(5), Decimal(5), "5"),
        ], columns)
        assert migrations.apply(db)[0] == "0020_invoice_lifecycle.sql"
        invoice = invoice_store.find(db, "GB-2026-000001")
        assert (invoice.id, invoice.status, invoice.revision, invoice.total) == (
            "GB-2026-000001", "issued", 1, Decimal("10.60"))
        assert [(line.kind, line.amount) for line in invoice.lines] == [("rent", Decimal(12)), ("credit", Decimal(-2))]
        assert db.query("SELECT count() FROM invoice_lines WHERE tenant = 'beta'")[0][0] == 0
        assert invoice_store.next_number(db, 2026) == ("GB-2026-000002", 2)
        assert {row[0] for row in db.query("SHOW TABLES")} >= {"credit_notes", "credit_note_lines", "invoice_journal"}
        assert not {row[0] for row in db.query("SHOW TABLES")} & {"invoices_0002", "invoice_lines_0002"}
