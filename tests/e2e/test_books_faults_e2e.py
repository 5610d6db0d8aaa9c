"""The books under faults (issue 37), on the real broker and chDB: nothing lost, nothing doubled,
both series gap-free.

    1. kill -9 at each boundary of a money command — before its fact is appended (the
       failpoints `invoice-header`, `credit-note-header`), after the append and before the
       projection (`books-appended`), inside the projection, rows written and their position
       not stamped (`books-projected`) — then the next command: a fact appended before the
       kill is projected by the next money command (a read does not catch up), none twice.
    2. Two hosts, each with its own embedded database, issuing from one log at once: the one
       that opened first is fenced by Kafka and refuses in one line; the numbers on the log are
       unique and gap-free, and both databases show the same documents once caught up. A
       command fenced the same way refuses in one line, exit 1, and nothing of it is recorded.
    3. Kafka down: a money command refuses in one line, exit 1, and the database is unchanged.
    4. A books event of a newer schema version: the next money command refuses in one line
       naming its topic, partition and offset; nothing after it is projected.

The rated rows are written straight into the database (tests/unit/test_invoice_lock_runs.py's
seed: tenant tNN rents one A800 at ¥1/s for SECONDS[tNN] seconds of March 2026, unregistered,
so no trial credit): tNN's invoice is one rent line of SECONDS[tNN] yuan, VAT 6 % on top —
what an uninterrupted run issues, computed here independently (`expected_invoice`).

A failpoint file "600 N" pauses the command the N-th time it passes that point
(usage/failpoints.py): an invoice run records the rule set first, then one invoice per tenant.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

from billing.books_projection import positions
from gpubill.config import Settings
from schemas.books import BooksEvent, CreditNoteIssued, InvoiceFact, TenantFact, encode_event
from schemas.topics import TOPIC_BOOKS
from streams.kafka.books import KafkaBooks, read_books
from tests.chdb_template import migrated_dsn
from tests.e2e.faults_helpers import kill9, produce_raw
from tests.unit.test_invoice_lock_runs import PERIOD, seed_tenants
from warehouse.connection import open_database

pytestmark = pytest.mark.e2e

WRITER = Path(__file__).parent / "books_writer.py"
CENT = Decimal("0.01")
TENANTS = {"t01": 30, "t02": 60, "t03": 90, "t04": 120, "t05": 150}  # seconds at ¥1/s


def expected_invoice(seconds: int) -> tuple[Decimal, Decimal, Decimal]:
    """(subtotal, tax, total) of an invoice of `seconds` seconds at ¥1/s: no credit, VAT 6 % to the fen.
    E.g. 90 s → 90.00 + 5.40 = 95.40."""
    subtotal = Decimal(seconds).quantize(CENT)
    tax = (subtotal * Decimal("0.06")).quantize(CENT, ROUND_HALF_UP)
    return subtotal, tax, subtotal + tax


def series(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-2026-{i:06d}" for i in range(1, n + 1)]


# ----------------------------------------------------------------------------- helpers


def dsn_of(gpubill) -> str:
    return gpubill.env["GPUBILL_CLICKHOUSE"]


def seeded(gpubill, seconds: dict[str, int]) -> str:
    """The test's database, migrated, with `seconds` of rated rent per tenant."""
    dsn = migrated_dsn(Path(dsn_of(gpubill)[len("chdb://"):]))
    with open_database(dsn) as db:
        seed_tenants(db, seconds)
    return dsn


def start(gpubill, *args: str, failpoints: Path | None = None, **env: str) -> subprocess.Popen:
    """`gpubill *args` in a session of its own (kill9 kills it whole), its output in a file."""
    path = gpubill.cwd / f"{args[0]}-{time.monotonic_ns()}.log"
    extra = {"GPUBILL_FAILPOINTS": str(failpoints)} if failpoints else {}
    # one invoice per transaction: each invoice's boundaries are what these tests kill at (an invoice
    # run records 100 at a time by default; test_invoice_concurrency.py kills one inside a group)
    extra["GPUBILL_BOOKS_BATCH"] = "1"
    with path.open("w") as log:
        process = subprocess.Popen([sys.executable, "-m", "gpubill.cli", *args], env={**gpubill.env, **extra, **env},
                                   cwd=gpubill.cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    process.log_path = path  # type: ignore[attr-defined]
    return process


def output_of(process: subprocess.Popen) -> str:
    return process.log_path.read_text()  # type: ignore[attr-defined]


def wait_reached(failpoints: Path, name: str, process: subprocess.Popen, timeout_s: float = 120) -> None:
    reached = failpoints / f"{name}.reached"
    deadline = time.monotonic() + timeout_s
    while not reached.exists():
        assert process.poll() is None, f"exited {process.returncode} before failpoint {name}:\n{output_of(process)}"
        assert time.monotonic() < deadline, f"failpoint {name} not reached in {timeout_s} s"
        time.sleep(0.05)


def killed_at(gpubill, failpoints: Path, name: str, nth: int, *args: str) -> None:
    """Run `gpubill *args` and SIGKILL it the `nth` time it reaches the failpoint `name`."""
    (failpoints / name).write_text(f"600 {nth}")
    process = start(gpubill, *args, failpoints=failpoints)
    try:
        wait_reached(failpoints, name, process)
    finally:
        kill9(process)
    (failpoints / name).unlink()
    (failpoints / f"{name}.reached").unlink()


def one_error_line(done: subprocess.CompletedProcess | str) -> str:
    """The command's one `error:` line (exactly one, and nothing after it)."""
    text = done if isinstance(done, str) else done.stdout + done.stderr
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and text.rstrip().endswith(errors[0]), text
    return errors[0]


def on_the_log(gpubill) -> list[tuple[int, BooksEvent]]:
    read = read_books(Settings(kafka=gpubill.env["GPUBILL_KAFKA"]))
    assert all(isinstance(event, BooksEvent) for _, event in read), read
    return read  # type: ignore[return-value]


def issued_on_log(events: list[tuple[int, BooksEvent]]) -> list[tuple[str, str]]:
    """(number, tenant) of every invoice_issued fact, in log order."""
    return [(e.fact.header.number, e.fact.header.tenant) for _, e in events
            if isinstance(e.fact, InvoiceFact) and e.fact.kind == "invoice_issued"]


def notes_on_log(events: list[tuple[int, BooksEvent]]) -> list[tuple[str, Decimal]]:
    return [(e.fact.note.number, e.fact.note.subtotal) for _, e in events if isinstance(e.fact, CreditNoteIssued)]


def offset_of(events: list[tuple[int, BooksEvent]], number: str) -> int:
    return next(o for o, e in events if isinstance(e.fact, (InvoiceFact, CreditNoteIssued))
                and (e.fact.header.number if isinstance(e.fact, InvoiceFact) else e.fact.note.number) == number)


def issued_in(dsn: str) -> list[tuple[str, str]]:
    """(number, tenant) of the issued invoices the database shows (as every reader: FINAL)."""
    with open_database(dsn) as db:
        return [tuple(r) for r in db.query("SELECT number, tenant FROM invoices FINAL WHERE status = 'issued' "
                                           "ORDER BY number, tenant")]


def stamped(dsn: str) -> int:
    """The next offset of the books the database has projected (its books_positions)."""
    with open_database(dsn) as db:
        found = positions(db, TOPIC_BOOKS)
    return found[0].next_offset if 0 in found else 0


# ------------------------------------------------------------------------ 1. kill -9


def test_an_invoice_run_killed_at_each_boundary_issues_every_invoice_once(gpubill, tmp_path):
    """Four runs of one period over five tenants, the first three killed: before t02's append,
    after t03's append, inside t04's projection; the fourth completes the period."""
    dsn = seeded(gpubill, TENANTS)
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    run = ("invoice", "run", "--period", PERIOD)

    # (a) before the append: the rule set and t01's invoice recorded, killed before t02's is appended
    killed_at(gpubill, failpoints, "invoice-header", 2, *run)
    assert issued_on_log(on_the_log(gpubill)) == [("GB-2026-000001", "t01")]
    assert issued_in(dsn) == [("GB-2026-000001", "t01")]

    # (b) after the append: t02's invoice appended and projected; t03's appended, killed before its projection
    killed_at(gpubill, failpoints, "books-appended", 2, *run)
    events = on_the_log(gpubill)
    assert issued_on_log(events) == [("GB-2026-000001", "t01"), ("GB-2026-000002", "t02"), ("GB-2026-000003", "t03")]
    assert issued_in(dsn) == [("GB-2026-000001", "t01"), ("GB-2026-000002", "t02")]
    assert stamped(dsn) <= offset_of(events, "GB-2026-000003")
    listed = gpubill.json("invoice", "list", "--period", PERIOD, "--json")  # a read: it does not catch up
    assert [i["number"] for i in listed] == series("GB", 2)

    # (c) inside the projection: the next run projects t03 on opening, then t04's rows are
    # written and it is killed before their position is stamped
    killed_at(gpubill, failpoints, "books-projected", 2, *run)
    events = on_the_log(gpubill)
    assert [n for n, _ in issued_on_log(events)] == series("GB", 4)
    assert issued_in(dsn) == list(zip(series("GB", 4), ["t01", "t02", "t03", "t04"]))
    assert stamped(dsn) <= offset_of(events, "GB-2026-000004")  # t04 will be projected again

    # the next run: t04 projected a second time (not doubled), t05 numbered after it
    done = gpubill.run(*run)
    assert done.stdout.startswith(f"{PERIOD}: 1 invoice created, 4 already final"), done.stdout
    events = on_the_log(gpubill)
    expected = list(zip(series("GB", 5), sorted(TENANTS)))
    assert issued_on_log(events) == expected  # each on the log once, gap-free
    assert issued_in(dsn) == expected
    assert stamped(dsn) > events[-1][0]  # everything on the log projected
    with open_database(dsn) as db:
        headers = db.query("SELECT tenant, subtotal, credit_used, net, tax, total FROM invoices FINAL "
                           "WHERE period = {p:String} ORDER BY tenant", {"p": PERIOD})
        lines = db.query("SELECT tenant, number, line_no, kind, amount FROM invoice_lines FINAL "
                         "WHERE period = {p:String} ORDER BY tenant, line_no", {"p": PERIOD})
        journal = db.query("SELECT invoice, action, count() FROM invoice_journal FINAL GROUP BY invoice, action "
                           "ORDER BY invoice, action")
        runs = db.query("SELECT count() FROM billing_runs FINAL WHERE period = {p:String}", {"p": PERIOD})[0][0]
    # the invoices an uninterrupted run issues: one rent line each, ¥1/s, VAT 6 %
    figures = {t: expected_invoice(s) for t, s in TENANTS.items()}
    assert [tuple(h) for h in headers] == [(t, subtotal, Decimal(0), subtotal, tax, total)  # net: no credit
                                           for t, (subtotal, tax, total) in sorted(figures.items())]
    assert [tuple(line) for line in lines] == [
        (t, n, 1, "rent", Decimal(TENANTS[t])) for n, t in expected]
    assert [tuple(j) for j in journal] == [(n, "issued", 1) for n, _ in expected]
    assert runs == 1  # the killed runs never completed
    history = gpubill.json("invoice", "history", "GB-2026-000004", "--json")  # the invoice projected twice
    assert [(h["action"], h["invoice"]) for h in history] == [("issued", "GB-2026-000004")]


def test_a_credit_note_killed_at_each_boundary_is_issued_once(gpubill, tmp_path):
    """Credit notes on GB-2026-000001 (t01: rent 30.00): killed before the append, after it,
    inside its projection; then one more. The note appended before a kill stands, once."""
    dsn = seeded(gpubill, {"t01": 30})
    gpubill.run("invoice", "run", "--period", PERIOD)
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()

    def credit(amount: str) -> tuple[str, ...]:
        return ("credit-note", "create", "--invoice", "GB-2026-000001", "--reason", "goodwill",
                "--line", f"1={amount}", "--json")

    # (a) before the append: nothing happened, on the log or in the database
    killed_at(gpubill, failpoints, "credit-note-header", 1, *credit("1.00"))
    assert notes_on_log(on_the_log(gpubill)) == []
    with open_database(dsn) as db:
        assert [tuple(r) for r in db.query("SELECT (SELECT count() FROM credit_notes), "
                                           "(SELECT count() FROM credit_note_lines)")] == [(0, 0)]

    # (b) after the append: CN-2026-000001 is on the books; a read does not show it yet
    killed_at(gpubill, failpoints, "books-appended", 1, *credit("2.00"))
    assert notes_on_log(on_the_log(gpubill)) == [("CN-2026-000001", Decimal("2.00"))]
    assert gpubill.json("credit-note", "list", "--json") == []

    # (c) inside the projection: the next note projects CN-2026-000001 on opening, then writes
    # CN-2026-000002's rows and is killed before their position is stamped
    killed_at(gpubill, failpoints, "books-projected", 2, *credit("3.00"))
    events = on_the_log(gpubill)
    assert notes_on_log(events) == [("CN-2026-000001", Decimal("2.00")), ("CN-2026-000002", Decimal("3.00"))]
    assert stamped(dsn) <= offset_of(events, "CN-2026-000002")

    made = json.loads(gpubill.run(*credit("4.00")).stdout)
    assert [(m["number"], m["total"]) for m in made] == [("CN-2026-000003", "4.24")]  # 4.00 + VAT 0.24
    events = on_the_log(gpubill)
    expected = [("CN-2026-000001", Decimal("2.00")), ("CN-2026-000002", Decimal("3.00")),
                ("CN-2026-000003", Decimal("4.00"))]
    assert notes_on_log(events) == expected
    assert stamped(dsn) > events[-1][0]
    with open_database(dsn) as db:
        notes = db.query("SELECT number, subtotal, tax, total FROM credit_notes FINAL ORDER BY number")
        lines = db.query("SELECT number, line_no, invoice_line_no, amount FROM credit_note_lines FINAL ORDER BY number")
        journal = db.query("SELECT action, document, count() FROM invoice_journal FINAL "
                           "WHERE invoice = 'GB-2026-000001' GROUP BY action, document ORDER BY action, document")
    # VAT reversed at 6 %: 2.00 → 0.12, 3.00 → 0.18, 4.00 → 0.24
    vat = {n: (s * Decimal("0.06")).quantize(CENT, ROUND_HALF_UP) for n, s in expected}
    assert [tuple(n) for n in notes] == [(n, s, vat[n], s + vat[n]) for n, s in expected]
    assert [tuple(line) for line in lines] == [(n, 1, 1, s) for n, s in expected]
    assert [tuple(j) for j in journal] == [("credit_note", n, 1) for n, _ in expected] + [("issued", "", 1)]


def test_an_invoice_run_numbers_each_invoice_after_the_one_it_recorded_before(gpubill, tmp_path):
    """Readers see a committed fact only once Kafka has written its transaction's markers, a few
    milliseconds after the commit returned, and never past a transaction still open before it
    (read committed stops at the last stable offset). Here another writer holds one open on the
    books while a run records: its own invoices are on the log and not yet readable. The run must
    still number each after the one before — waiting until it can read it, or refusing in one
    line that says the fact is recorded — and never take a number twice. (Without the open
    transaction the window is those milliseconds: a plain run over 20 tenants issued
    GB-2026-000002 twice.) The other writer aborts once t02's number is taken, or after 4 s."""
    from kafka import KafkaProducer

    from streams.kafka.books import ensure_books_topic

    dsn = seeded(gpubill, {"t01": 30, "t02": 60, "t03": 90})
    bootstrap = gpubill.env["GPUBILL_KAFKA"]
    ensure_books_topic(Settings(kafka=bootstrap))  # one partition (a producer would make it with the broker's default)
    other = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="e2e.another-writer", enable_idempotence=True,
                          acks="all", transaction_timeout_ms=60_000)
    try:
        other.init_transactions()
        other.begin_transaction()
        other.send(TOPIC_BOOKS, key=b"", value=b"{}").get(timeout=30)
        failpoints = tmp_path / "failpoints"
        failpoints.mkdir()
        (failpoints / "books-appended").write_text("0 1")  # no pause: marks the run's first append (its rule set)
        (failpoints / "invoice-header").write_text("0 2")  # no pause: marks t02's header, its number taken
        run = start(gpubill, "invoice", "run", "--period", PERIOD, failpoints=failpoints)
        wait_reached(failpoints, "books-appended", run)
        deadline = time.monotonic() + 4
        while not (failpoints / "invoice-header.reached").exists() and run.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        other.abort_transaction()
    finally:
        other.close(timeout=10)
    run.wait(timeout=120)
    expected = [("GB-2026-000001", "t01"), ("GB-2026-000002", "t02"), ("GB-2026-000003", "t03")]
    on_log = issued_on_log(on_the_log(gpubill))
    assert len({n for n, _ in on_log}) == len(on_log), f"a number issued twice: {on_log}"
    if run.returncode == 0:
        assert on_log == expected and issued_in(dsn) == expected, (on_log, output_of(run))
    else:
        assert "recorded on the books" in one_error_line(output_of(run)), output_of(run)
        assert [n for n, _ in on_log] == series("GB", len(on_log))


# --------------------------------------------------------------- 2. two writers at once


def writer(gpubill, dsn: str, name: str, count: int, pause_s: float, numbers: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WRITER), name, str(count), str(pause_s), str(numbers)],
                            env={**gpubill.env, "GPUBILL_CLICKHOUSE": dsn}, cwd=gpubill.cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def caught_up(gpubill, dsn: str) -> list[tuple]:
    """The database's issued invoices once it has projected the books to their end."""
    settings = Settings(kafka=gpubill.env["GPUBILL_KAFKA"], clickhouse=dsn)
    with open_database(dsn) as db, KafkaBooks(settings).open_reader() as log:
        log.catch_up(db)
        return [tuple(r) for r in db.query("SELECT number, tenant, total FROM invoices FINAL ORDER BY number, tenant")]


def test_two_hosts_issuing_at_once_one_is_fenced_numbers_stay_gap_free(gpubill, tmp_path):
    """Host a issues every 0.2 s from its own database; host b opens the numbered series while a
    is mid-loop: a is fenced at its next record and stops, b numbers after everything a committed."""
    dsn_a, dsn_b = migrated_dsn(tmp_path / "host-a"), migrated_dsn(tmp_path / "host-b")
    numbers_a, numbers_b = tmp_path / "a.txt", tmp_path / "b.txt"
    host_a = writer(gpubill, dsn_a, "a", 200, 0.2, numbers_a)
    deadline = time.monotonic() + 60
    while not numbers_a.exists() or len(numbers_a.read_text().split()) < 2:
        assert host_a.poll() is None, host_a.communicate()
        assert time.monotonic() < deadline, "host a did not issue two numbers in 60 s"
        time.sleep(0.05)
    host_b = writer(gpubill, dsn_b, "b", 4, 0.1, numbers_b)
    _, err_b = host_b.communicate(timeout=120)
    _, err_a = host_a.communicate(timeout=120)
    assert host_b.returncode == 0, err_b
    assert host_a.returncode == 3 and len(err_a.strip().splitlines()) == 1 and "fenced" in err_a, err_a

    by_a, by_b = numbers_a.read_text().split(), numbers_b.read_text().split()
    on_log = issued_on_log(on_the_log(gpubill))
    assert [n for n, _ in on_log] == series("GB", len(by_a) + 4)  # unique, gap-free, in log order
    assert on_log == [(n, f"a-{i}") for i, n in enumerate(by_a)] + [(n, f"b-{i}") for i, n in enumerate(by_b)]
    documents = [(n, t, Decimal("10.60")) for n, t in on_log]
    assert caught_up(gpubill, dsn_a) == documents
    assert caught_up(gpubill, dsn_b) == documents


def test_a_command_fenced_by_another_host_refuses_in_one_line_and_records_nothing(gpubill, tmp_path):
    """`invoice run` on host 1 holds at its first invoice's header; host 2 opens the numbered
    series and issues GB-2026-000001 meanwhile: host 1's run refuses in one line, exit 1, and
    run again numbers its invoices after host 2's."""
    dsn = seeded(gpubill, {"t01": 30, "t02": 60})
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    (failpoints / "invoice-header").write_text("600")
    held = start(gpubill, "invoice", "run", "--period", PERIOD, failpoints=failpoints)
    wait_reached(failpoints, "invoice-header", held)
    other = writer(gpubill, migrated_dsn(tmp_path / "host-2"), "other", 1, 0, tmp_path / "other.txt")
    assert other.wait(timeout=120) == 0, other.communicate()
    (failpoints / "invoice-header").unlink()
    assert held.wait(timeout=120) == 1, output_of(held)
    assert "fenced" in one_error_line(output_of(held))
    assert issued_on_log(on_the_log(gpubill)) == [("GB-2026-000001", "other-0")]

    done = gpubill.run("invoice", "run", "--period", PERIOD)
    assert done.stdout.startswith(f"{PERIOD}: 2 invoices created"), done.stdout
    expected = [("GB-2026-000001", "other-0"), ("GB-2026-000002", "t01"), ("GB-2026-000003", "t02")]
    assert issued_on_log(on_the_log(gpubill)) == expected
    assert issued_in(dsn) == expected


# ------------------------------------------------------------------------ 3. Kafka down


def table_counts(dsn: str) -> dict[str, int]:
    """Rows of every table of the database (views left out)."""
    with open_database(dsn) as db:
        names = [r[0] for r in db.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                                        "AND engine NOT LIKE '%View' ORDER BY name")]
        return {name: int(db.query(f"SELECT count() FROM `{name}`")[0][0]) for name in names}


def test_kafka_down_a_money_command_refuses_in_one_line_and_writes_nothing(gpubill):
    dsn = seeded(gpubill, {"t01": 30})
    before = table_counts(dsn)
    assert before["rated_seconds"] == 30 and before["invoices"] == 0
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{probe.getsockname()[1]}"
    gpubill.env["GPUBILL_KAFKA"] = down
    # (`invoice run` without --offline refuses the same way one step earlier, at the log of corrections)
    for args in (("tenant", "add", "t01", "--name", "One"), ("invoice", "run", "--period", PERIOD, "--offline")):
        done = gpubill.run(*args, check=False)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert f"no Kafka broker answers at {down}" in one_error_line(done), args
    assert table_counts(dsn) == before


# --------------------------------------------------------------- 4. a newer schema version


def test_a_books_event_of_a_newer_version_halts_the_projection_where_it_is(gpubill):
    """t01 registered (offset 0); then a v99 event, then t02's registration written by this
    gpubill: the next money command refuses naming the v99 event's place, t02 is not projected."""
    dsn = migrated_dsn(Path(dsn_of(gpubill)[len("chdb://"):]))
    gpubill.run("tenant", "add", "t01", "--name", "One")
    (registered_at, registered), = on_the_log(gpubill)
    assert isinstance(registered.fact, TenantFact)
    t02 = registered.model_copy(update={"fact": registered.fact.model_copy(
        update={"tenant": registered.fact.tenant.model_copy(update={"tenant": "t02", "display_name": "Two"})})})
    newer = {"v": 99, "at": "2026-12-01T00:00:00Z", "writer": "future:1", "fact": {"kind": "payment_received"}}
    produce_raw(gpubill.env["GPUBILL_KAFKA"], [(TOPIC_BOOKS, b"t09", json.dumps(newer).encode()),
                                               (TOPIC_BOOKS, b"t02", encode_event(t02))])
    halted_at = registered_at + 1

    done = gpubill.run("tenant", "add", "t03", "--name", "Three", check=False)
    assert done.returncode == 1, (done.stdout, done.stderr)
    line = one_error_line(done)
    assert f"{TOPIC_BOOKS} partition 0 offset {halted_at}" in line and "schema version 99" in line, line
    with open_database(dsn) as db:
        assert [r[0] for r in db.query("SELECT tenant FROM tenants FINAL ORDER BY tenant")] == ["t01"]
        found = positions(db, TOPIC_BOOKS)
    assert {p: position.next_offset for p, position in found.items()} == {0: halted_at}
    assert "schema version 99" in found[0].halted
    assert [e.fact.tenant.tenant for _, e in on_the_log_readable(gpubill)] == ["t01", "t02"]  # t03 never appended

    audited = gpubill.run("audit", "--period", PERIOD, "--offline", check=False)
    assert audited.returncode == 1, (audited.stdout, audited.stderr)  # audit shows the halt, and fails on it
    assert f"BOOKS HALTED {TOPIC_BOOKS} partition 0 offset {halted_at}: schema version 99" in audited.stdout, audited


def on_the_log_readable(gpubill) -> list[tuple[int, BooksEvent]]:
    """The events on the log this gpubill can read (the unreadable left out)."""
    return [(o, e) for o, e in read_books(Settings(kafka=gpubill.env["GPUBILL_KAFKA"])) if isinstance(e, BooksEvent)]
