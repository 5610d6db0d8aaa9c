"""The books' events and their projection (issue 37; schemas/books.py, billing/books*.py).

No broker here: tests/e2e/test_books_e2e.py runs the log itself (append, fencing, rebuild)."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orjson
import pytest

from billing import books
from billing.books_projection import PROJECTED_TABLES, project
from schemas import books as facts
from schemas.books import (
    BOOKS_SCHEMA_VERSION, BooksEvent, CreditNoteIssued, CreditNoteLineRow, CreditNoteRow, InvoiceFact,
    InvoiceHeaderRow, InvoiceLineRow, JournalRow, Row, TenantFact, TenantRow, UnreadableFact, decode_event,
    encode_event,
)
from tests.chdb_template import migrated_dsn
from warehouse.connection import open_database

ROOT = Path(__file__).resolve().parents[2]
AT = datetime(2026, 3, 1, 8, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / "ch")) as database:
        yield database


def _row_models() -> list[type[Row]]:
    return [v for v in vars(facts).values() if isinstance(v, type) and issubclass(v, Row) and v is not Row]


def test_every_row_model_is_its_table_column_for_column(db):
    """A column added to a migration and not to its row (or the reverse) fails here, not in a rebuild."""
    models = _row_models()
    assert {m.TABLE for m in models} == set(PROJECTED_TABLES)
    for model in models:
        described = [row[0] for row in db.query(f"DESCRIBE TABLE {model.TABLE}")]
        assert list(model.columns()) == described, model.TABLE


def _invoice_fact() -> InvoiceFact:
    header = InvoiceHeaderRow(
        id="GB-2026-000007", number="GB-2026-000007", year=2026, seq=7, tenant="acme", period="2026-02",
        status="issued", revision=1, replaces="", issued_at=AT, updated_at=AT, currency="CNY",
        subtotal=Decimal("100.10"), credit_used=Decimal("10.00"), net=Decimal("90.10"), tax=Decimal("5.41"),
        total=Decimal("95.51"), vat_rate=Decimal("0.0600"), rules_revision="0123456789ab")
    line = InvoiceLineRow(
        id=header.id, revision=1, number=header.number, tenant="acme", period="2026-02", line_no=1, kind="rent",
        gpu_model="A800", plan="hourly", site=None, band=None, pue=None, ref_period=None, credit_id=None,
        description="A800 80G, hourly", quantity=Decimal("10.010000"), unit="h", unit_price=Decimal("10.000000"),
        amount=Decimal("100.10"), exact_amount="1001/10")
    journal = JournalRow(at=AT, action="issued", invoice=header.number, document="", tenant="acme", period="2026-02",
                         actor="os:finance", reason="", detail="total 95.51 CNY")
    return InvoiceFact(kind="invoice_issued", header=header, lines=(line,), journal=(journal,),
                       seller=facts.Party(details={"legal_name": "GPU Cloud Ltd"}),
                       buyer=facts.Party(details={"tenant": "acme", "legal_name": "Acme 有限公司"}))


def test_an_event_reads_back_exactly_as_written():
    """Decimal keeps its digits ("0.0600", "10.010000"), times their microseconds and zone."""
    event = BooksEvent(at=AT, writer="host:1", fact=_invoice_fact())
    raw = encode_event(event)
    document = orjson.loads(raw)
    assert document["v"] == BOOKS_SCHEMA_VERSION
    assert document["fact"]["header"]["vat_rate"] == "0.0600"
    assert document["fact"]["lines"][0]["quantity"] == "10.010000"
    back = decode_event(raw)
    assert back == event
    assert back.fact.header.issued_at == AT and back.fact.header.issued_at.utcoffset().total_seconds() == 0
    assert str(back.fact.lines[0].unit_price) == "10.000000"


@pytest.mark.parametrize("raw, why", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"v": "1"}', "schema version '1' is not a positive integer"),
    (b'{"v": true}', "schema version True is not a positive integer"),
    (b'{"v": 0}', "schema version 0 is not a positive integer"),
    (b'{"v": 99, "anything": 1}', "schema version 99 is newer than this gpubill reads (1)"),
    (b'{"v": 1, "at": "2026-03-01T00:00:00Z", "writer": "h", "fact": {"kind": "money_printed"}}', "fact"),
    (b'{"v": 1, "at": "2026-03-01T00:00:00Z", "writer": "h", "fact": {"kind": "top_up", "top_up": {"ref": "r"}}}',
     "fact.top_up.top_up.tenant"),
])
def test_a_message_that_cannot_be_read_is_refused_in_one_line(raw, why):
    with pytest.raises(UnreadableFact) as refused:
        decode_event(raw)
    assert why in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_value_that_does_not_fit_a_column_is_refused():
    """Extra fields are refused too: a fact carries exactly its rows."""
    event = orjson.loads(encode_event(BooksEvent(at=AT, writer="h", fact=_invoice_fact())))
    event["fact"]["header"]["surprise"] = 1
    with pytest.raises(UnreadableFact, match="surprise"):
        decode_event(orjson.dumps(event))


def _count(db, table: str) -> int:
    return int(db.query(f"SELECT count() FROM {table} FINAL")[0][0])


def test_projecting_a_fact_twice_leaves_what_once_does(db):
    """At-least-once projection: a batch written again after a crash before its position was stamped."""
    note = CreditNoteIssued(
        kind="credit_note_issued",
        note=CreditNoteRow(number="CN-2026-000001", year=2026, seq=1, invoice="GB-2026-000007", tenant="acme",
                           period="2026-02", reason="goodwill", note="sorry", actor="os:finance", issued_at=AT,
                           currency="CNY", subtotal=Decimal("10.00"), tax=Decimal("0.60"), total=Decimal("10.60"),
                           vat_rate=Decimal("0.0600")),
        lines=(CreditNoteLineRow(number="CN-2026-000001", line_no=1, invoice="GB-2026-000007", invoice_line_no=1,
                                 kind="rent", description="A800", amount=Decimal("10.00")),),
        journal=(JournalRow(at=AT, action="credit_note", invoice="GB-2026-000007", document="CN-2026-000001",
                            tenant="acme", period="2026-02", actor="os:finance", reason="goodwill", detail="10.60"),))
    events = [BooksEvent(at=AT, writer="h", fact=fact) for fact in (_invoice_fact(), note)]
    project(db, events)
    project(db, events)
    assert [_count(db, t) for t in ("invoices", "invoice_lines", "credit_notes", "credit_note_lines",
                                    "invoice_journal")] == [1, 1, 1, 1, 2]
    total, issued_at = db.query("SELECT total, issued_at FROM invoices FINAL")[0]
    assert total == Decimal("95.51") and issued_at.replace(tzinfo=UTC) == AT.replace(microsecond=123000)


def test_a_money_write_with_no_books_open_writes_nothing(db):
    from billing.tenants import add_tenant, list_tenants

    with books.using(None):  # type: ignore[arg-type]
        with pytest.raises(books.BooksNotOpen, match="nothing was written"):
            add_tenant(db, "acme", "Acme")
    assert list_tenants(db) == []


def test_the_tenant_fact_is_the_row_the_registry_keeps(db):
    """What `tenant add` records is the whole row; the projection is the registry."""
    recorded: list[BooksEvent] = []

    class Capture(books.UnloggedBooks):
        def record(self, database, events):
            recorded.extend(events)
            super().record(database, events)

    from billing.tenants import add_tenant, find_tenant, set_status

    with books.using(Capture()):
        add_tenant(db, "acme", "Acme", legal_name="Acme Ltd", now=AT)
        set_status(db, "acme", "suspended", now=AT)
    assert [e.fact.kind for e in recorded] == ["tenant_registered", "tenant_suspended"]
    assert isinstance(recorded[0].fact, TenantFact) and recorded[0].fact.tenant.legal_name == "Acme Ltd"
    assert find_tenant(db, "acme").status == "suspended"
    assert recorded[1].fact.tenant == TenantRow(**{**recorded[0].fact.tenant.model_dump(), "status": "suspended",
                                                   "updated_at": recorded[1].fact.tenant.updated_at})


def test_no_command_writes_unlogged():
    """UnloggedBooks is for tests: no module of the product names it but its own."""
    offenders = []
    for package in ("gpubill", "billing", "streams", "reports", "tenant_api", "usage", "warehouse"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "billing" / "books.py":
                continue
            names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
            names |= {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
            if "UnloggedBooks" in names:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_an_invoice_run_records_its_invoices_a_group_at_a_time(db):
    """`batch` invoices per append (one transaction each on the log), numbered on from the group:
    5 tenants at 2 a group are 3 appends of 2, 2 and 1 invoices with the billing run, gap-free."""
    from billing.invoicing import run_period
    from tests.unit.test_invoice_lock_runs import NOW, PERIOD, RULES, assert_invoiced_once_gap_free, seed_tenants

    appended: list[list[str]] = []

    class Capture(books.UnloggedBooks):
        def record(self, database, events):
            appended.append([e.fact.kind for e in events])
            super().record(database, events)

    seconds = {"t01": 10, "t02": 20, "t03": 30, "t04": 40, "t05": 50}
    seed_tenants(db, seconds)
    with books.using(Capture()):
        report = run_period(db, RULES, PERIOD, now=NOW, batch=2)
    assert report.created == [f"GB-2026-{n:06d}" for n in range(1, 6)]
    assert appended == [["invoice_issued"] * 2, ["invoice_issued"] * 2, ["invoice_issued", "billing_run_completed"]]
    assert_invoiced_once_gap_free(db, seconds)


def test_a_run_that_fails_inside_a_group_appends_nothing_of_it(db, monkeypatch):
    from billing import invoicing
    from billing.invoicing import run_period
    from tests.unit.test_invoice_lock_runs import NOW, PERIOD, RULES, seed_tenants

    seed_tenants(db, {"t01": 10, "t02": 20, "t03": 30})
    calls = []

    def fail_at_the_third() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("killed")

    monkeypatch.setattr(invoicing, "_pause_before_header", fail_at_the_third)
    with pytest.raises(RuntimeError):
        run_period(db, RULES, PERIOD, now=NOW, batch=2)
    # the first group (t01, t02) was appended whole; t03's group never was
    assert [r[0] for r in db.query("SELECT tenant FROM invoices FINAL ORDER BY tenant")] == ["t01", "t02"]


def test_kafka_python_checks_the_books_batches_in_c():
    """pyproject.toml installs crc32c: kafka-python's C path for its per-batch check (half a rebuild's
    books share in pure Python). A fresh environment without it would still be correct, only slower."""
    from kafka.record import util

    assert util.crc32c_c is not None


def test_a_rule_set_on_the_books_loads_again_as_it_priced(db, tmp_path):
    """A rebuild prices an invoiced period under the revision that priced it: the recorded files
    load back into that very rule set (same revision, same prices), whatever the files on disk say now."""
    import shutil

    from billing.rule_sets import priced_under, record_rule_set, rules_of
    from billing_rules import load_rules
    from tests.rules_copies import TEST_RULES

    then_dir = tmp_path / "then"
    shutil.copytree(TEST_RULES, then_dir)
    catalog = then_dir / "catalog.toml"
    text = catalog.read_text(encoding="utf-8")
    assert "hourly = 3600.00" in text  # A800's ¥1/s in the test rules, ¥2/s "then"
    catalog.write_text(text.replace("hourly = 3600.00", "hourly = 7200.00", 1), encoding="utf-8")
    then, now = load_rules(then_dir), load_rules(TEST_RULES)
    assert then.revision != now.revision
    assert record_rule_set(db, then, then_dir) and not record_rule_set(db, then, then_dir)  # once per revision
    shutil.rmtree(then_dir)  # the files are gone from disk: the books still have them

    loaded = rules_of(db, then.revision)
    assert loaded.revision == then.revision and rules_of(db, "000000000000") is None
    assert loaded.digest == then.digest

    # 2026-02 invoiced under "then", 2026-03 re-rated under "now" after an invoice under "then",
    # 2026-04 invoiced under both (a rule edit between two runs): left out
    header = _invoice_fact().header
    rows = [header.model_copy(update={"id": f"I{n}", "number": f"GB-2026-00000{n}", "seq": n, "period": period,
                                      "tenant": tenant, "rules_revision": revision}).values()
            for n, (period, tenant, revision) in enumerate([
                ("2026-02", "acme", then.revision), ("2026-03", "acme", then.revision),
                ("2026-04", "acme", then.revision), ("2026-04", "beta", now.revision)], start=1)]
    db.insert("invoices", rows, type(header).columns())
    db.insert("rerate_runs", [("2026-03", 7, now.revision, 0, 1, 10, 0, AT, AT)],
              ("period", "generation", "rules_revision", "corrections", "hours", "seconds_written", "seconds_deleted",
               "started_at", "finished_at"))
    assert priced_under(db) == {"2026-02": then.revision, "2026-03": now.revision}


def test_rebuild_never_prints_a_server_password(monkeypatch, capsys, tmp_path):
    """`rebuild --into http://user:secret@…` names its target in its messages with the password masked."""
    import gpubill.cli.rebuild as rebuild_cli
    from tests.unit.cli_run import run_cli

    class Filled:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def query(self, sql, params=None):
            return [(3,)]

    monkeypatch.setattr(rebuild_cli, "connect", lambda settings: Filled())
    code, out, err = run_cli(monkeypatch, capsys, "rebuild", "--yes", "--into",
                             "http://gpubill:s3cret-pass@127.0.0.1:1/gpubill")
    assert code == 1 and "s3cret-pass" not in out + err and "gpubill:***@127.0.0.1" in err, (out, err)
