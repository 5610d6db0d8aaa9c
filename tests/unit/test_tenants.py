"""The tenant registry (issue 13): hostile ids and names refused in one line, the registry's
writes, who gets the trial credit on an invoice run, and what `tenant unknown` and the
worker's gauges count.

March 2026 in the test rules (tests/e2e/rules): A800-80G hourly at ¥3600/h = ¥1 per rented
second; trial credit ¥10 (billing.toml); acme has a contract credit of ¥150 usable in March
only (contracts.toml); VAT 6 %.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import schemas
from billing.errors import NotFound
from billing.invoicing import load_invoice, run_period
from billing_rules import load_rules
from billing.tenants import (
    ACTIVE,
    SUSPENDED,
    InvalidTenant,
    TenantExists,
    add_tenant,
    check_display_name,
    check_note,
    check_tenant_id,
    find_tenant,
    list_tenants,
    registered_tenants,
    set_status,
    tenant_sql,
    trial_tenants,
    unregistered_sql,
    unregistered_usage,
)
from schemas.ids import ID_PATTERN
from schemas.tables import RATED_SECONDS
from streams.metrics import Metrics, unregistered_counts
from tests.chdb_template import migrated_dsn
from warehouse import migrations, writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES = load_rules(Path(__file__).parents[1] / "e2e" / "rules")
MARCH, APRIL = "2026-03", "2026-04"
NOW = datetime(2026, 5, 10, tzinfo=UTC)  # March and April closed

HOSTILE_IDS = [
    pytest.param("/", id="slash"),
    pytest.param("a/b", id="slash-inside"),
    pytest.param("..", id="dot-dot"),
    pytest.param("../etc", id="traversal"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("acme\n", id="trailing-newline"),
    pytest.param("a\nb", id="newline"),
    pytest.param("\u202eacme", id="rtl-override"),
    pytest.param("a" * 300, id="300-chars"),
    pytest.param("a" * 65, id="65-chars"),
    pytest.param("", id="empty"),
    pytest.param("\u0430cme", id="cyrillic-a"),
    pytest.param(" acme", id="leading-space"),
    pytest.param("-acme", id="leading-dash"),
    pytest.param("[bold]x", id="markup"),
]


def assert_one_printable_line(message: str) -> None:
    assert message and "\n" not in message and all(ch.isprintable() for ch in message), ascii(message)


# -------------------------------------------------------------------------- checks (pure)


@pytest.mark.parametrize("value", HOSTILE_IDS)
def test_a_hostile_tenant_id_is_refused_in_one_printable_line(value):
    with pytest.raises(InvalidTenant) as refused:
        check_tenant_id(value)
    assert_one_printable_line(str(refused.value))


def test_the_refusal_names_what_is_wrong():
    with pytest.raises(InvalidTenant, match=r"U\+0430 \(CYRILLIC SMALL LETTER A\)"):
        check_tenant_id("\u0430cme")
    with pytest.raises(InvalidTenant, match="300 characters long: at most 64"):
        check_tenant_id("a" * 300)
    with pytest.raises(InvalidTenant, match="is empty"):
        check_tenant_id("")


@pytest.mark.parametrize("value", ["acme", "tenant-01", "A", "a" * 64, "team_7.prod"])
def test_an_id_in_the_id_syntax_is_kept_as_it_is(value):
    assert check_tenant_id(value) == value


@pytest.mark.parametrize("name, stored", [
    ("名字", "名字"),
    ("شركة بيتا", "شركة بيتا"),  # Arabic: right to left by itself, no override needed
    ("Общество «Бета»", "Общество «Бета»"),
    ("می\u200cخواهم", "می\u200cخواهم"),  # Persian spelling needs ZWNJ
    ("👩\u200d💻 Lab", "👩\u200d💻 Lab"),  # an emoji ZWJ sequence
    ("  Acme GmbH  ", "Acme GmbH"),  # surrounding blanks dropped
    ("Cafe\u0301", "Café"),  # NFC: one spelling, one name
    ("x" * 100, "x" * 100),
])
def test_a_display_name_may_be_in_any_script(name, stored):
    assert check_display_name(name) == stored


@pytest.mark.parametrize("name, reason", [
    ("", "is empty"),
    ("   ", "is empty"),
    ("a\x00b", r"U\+0000"),
    ("two\nlines", r"U\+000A \(a control character\)"),
    ("evil\u202eexe.pdf", r"U\+202E \(RIGHT-TO-LEFT OVERRIDE\)"),
    ("a\u2066b", r"U\+2066"),  # a bidi isolate
    ("a\u200bb", r"U\+200B"),  # zero-width space: two names that look the same
    ("a\ufeffb", r"U\+FEFF"),
    ("a\u2028b", r"U\+2028"),  # line separator
    ("\x1b[31mred", r"U\+001B"),  # a terminal escape
    ("\ue000", r"U\+E000"),  # private use
    ("x" * 101, "101 characters long: at most 100"),
])
def test_a_hostile_display_name_is_refused_in_one_printable_line(name, reason):
    with pytest.raises(InvalidTenant, match=reason) as refused:
        check_display_name(name)
    assert_one_printable_line(str(refused.value))


def test_a_note_may_be_empty_but_is_bounded_and_checked_like_a_name():
    assert check_note("") == "" and check_note(" ticket 42 ") == "ticket 42"
    with pytest.raises(InvalidTenant, match="201 characters long: at most 200"):
        check_note("n" * 201)
    with pytest.raises(InvalidTenant, match=r"U\+202E"):
        check_note("\u202e")


def test_the_migration_backfills_only_ids_in_the_one_id_syntax():
    sql = (Path(schemas.__file__).parent / "migrations" / "0011_tenants.sql").read_text(encoding="utf-8")
    assert re.findall(r"match\(tenant, '([^']*)'\)", sql) == [ID_PATTERN]


# -------------------------------------------------------------------------- SQL builders (pure)


def test_the_registry_is_read_at_its_latest_rows():
    select = ("SELECT tenant, display_name, status, created_at, updated_at, note, "
              "legal_name, tax_id, address, email FROM tenants FINAL")
    assert tenant_sql() == f"{select} ORDER BY tenant"
    assert tenant_sql(one=True) == f"{select} WHERE tenant = {{t:String}} ORDER BY tenant"
    assert tenant_sql(status="x") == f"{select} WHERE status = {{s:String}} ORDER BY tenant"


def test_the_unregistered_relation_leaves_out_registered_ids_and_unallocated_energy():
    assert unregistered_sql("(SELECT 1)") == (
        "(SELECT * FROM (SELECT 1) WHERE tenant != '' AND tenant NOT IN (SELECT tenant FROM tenants))")


# -------------------------------------------------------------------------- the registry


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as database:
        yield database


def test_add_is_idempotent_for_the_same_name_and_refuses_another(db):
    at = datetime(2026, 3, 1, 8, 0, 0, 123456, tzinfo=UTC)
    added, created = add_tenant(db, "acme", " 名字 ", note="ticket 1", now=at)
    assert created and (added.tenant, added.display_name, added.status, added.note) == ("acme", "名字", ACTIVE, "ticket 1")
    assert added.created_at == added.updated_at == datetime(2026, 3, 1, 8, 0, 0, 123000, tzinfo=UTC)
    assert find_tenant(db, "acme") == added

    again, created = add_tenant(db, "acme", "名字", now=datetime(2026, 4, 1, tzinfo=UTC))
    assert not created and again == added  # nothing written
    with pytest.raises(TenantExists, match="acme is already registered as '名字'"):
        add_tenant(db, "acme", "Acme")
    assert list_tenants(db) == [added]


@pytest.mark.parametrize("tenant, name", [("a/b", "x"), ("\u0430cme", "x"), ("ok", "a\u202eb"), ("ok", "")])
def test_a_refused_add_writes_nothing(db, tenant, name):
    with pytest.raises(InvalidTenant):
        add_tenant(db, tenant, name)
    assert db.query("SELECT count() FROM tenants")[0][0] == 0


def test_suspend_and_resume_keep_the_name_and_creation_and_win_within_one_millisecond(db):
    at = datetime(2026, 3, 1, tzinfo=UTC)
    add_tenant(db, "beta", "Beta", note="signed", now=at)
    suspended, changed = set_status(db, "beta", SUSPENDED, note="unpaid", now=at)  # the same instant
    assert changed and (suspended.status, suspended.display_name, suspended.note) == (SUSPENDED, "Beta", "unpaid")
    assert suspended.created_at == at and suspended.updated_at == datetime(2026, 3, 1, 0, 0, 0, 1000, tzinfo=UTC)
    assert find_tenant(db, "beta") == suspended

    assert set_status(db, "beta", SUSPENDED, now=at) == (suspended, False)
    resumed, changed = set_status(db, "beta", ACTIVE, now=at)
    assert changed and resumed.status == ACTIVE and resumed.note == "unpaid"  # no new note: the last one stays
    assert find_tenant(db, "beta") == resumed and trial_tenants(db) == {"beta"}

    with pytest.raises(NotFound, match="tenant nobody is not registered"):
        set_status(db, "nobody", SUSPENDED)
    with pytest.raises(InvalidTenant, match="status 'gone' is not one of active, suspended"):
        set_status(db, "beta", "gone")


def test_only_registered_active_tenants_get_the_trial_and_every_registered_one_is_known(db):
    add_tenant(db, "gamma", "Gamma")
    add_tenant(db, "delta", "Delta")
    set_status(db, "delta", SUSPENDED)
    assert trial_tenants(db) == {"gamma"}
    assert registered_tenants(db) == {"gamma", "delta"}
    assert [t.tenant for t in list_tenants(db, status=SUSPENDED)] == ["delta"]


# -------------------------------------------------------------------------- the invoice run


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    """Hours are rolled up and read from rollups as soon as they are written."""
    monkeypatch.setattr(writes, "MARGIN_S", 0)


def rent(db, tenant: str, period: str, seconds: int, *, energy_mw: int = 0, card: str | None = None) -> None:
    """`seconds` rented seconds of an A800-80G (hourly, ¥1/s) from the period's first second, as
    the pipeline rates them; with `energy_mw`, that draw allocated to the tenant each second."""
    lo, _ = RULES.period_bounds(period)
    rows = []
    for second in range(lo, lo + seconds):
        at = datetime.fromtimestamp(second, UTC)
        base = {c: 0 for c in RATED_SECONDS} | {
            "gpu_uuid": card or f"G-{tenant}", "second": at, "period": period, "tenant": tenant,
            "instance": f"i-{tenant}", "site": "gz-guian", "node": "gz-n1", "plan": "", "rent_price": Decimal(0),
            "discount_pct": Decimal(0), "util_pct": Decimal(0), "band": "", "tariff_per_kwh": Decimal(0),
            "pue": Decimal(0), "version": 1, "measured": 0, "rated_at": at, "gpu_model": "A800-80G"}
        rows.append(base | {"stream": "rent", "plan": "hourly", "rent_price": Decimal(3600), "rent_per_s": 3600})
        if energy_mw:
            rows.append(base | {"stream": "energy", "energy_mj": energy_mw, "band": "flat",
                                "tariff_per_kwh": Decimal(330), "pue": Decimal("1.12")})
    db.insert("rated_seconds", [[row[c] for c in RATED_SECONDS] for row in rows], RATED_SECONDS)
    stamp_hours(db, {(period, lo // 3600 * 3600)})
    time.sleep(0.01)  # a rollup starts strictly after the writes' stamps


def credits(invoice) -> list[tuple[str, Decimal]]:
    return [(line.credit_id, line.amount) for line in invoice.lines if line.kind == "credit"]


def test_the_trial_credit_goes_only_to_registered_active_tenants(db):
    add_tenant(db, "gamma", "Gamma")  # registered, active
    add_tenant(db, "delta", "Delta")
    set_status(db, "delta", SUSPENDED)  # registered, suspended
    for tenant in ("gamma", "delta", "ghost", "acme"):  # ghost and acme are not registered
        rent(db, tenant, MARCH, 30)  # 30 s × ¥1 = ¥30.00 each

    report = run_period(db, RULES, MARCH, now=NOW)
    assert len(report.created) == 4 and report.unregistered == ["acme", "ghost"]  # every one is invoiced
    invoices = {t: load_invoice(db, t, MARCH) for t in ("gamma", "delta", "ghost", "acme")}
    # gamma: 30.00 − 10.00 trial = net 20.00; VAT 1.20; total 21.20
    assert credits(invoices["gamma"]) == [("trial", Decimal("-10.00"))]
    assert (invoices["gamma"].net, invoices["gamma"].tax, invoices["gamma"].total) == (
        Decimal("20.00"), Decimal("1.20"), Decimal("21.20"))
    # delta (suspended) and ghost (unknown) owe it all: net 30.00; VAT 1.80; total 31.80
    for tenant in ("delta", "ghost"):
        assert credits(invoices[tenant]) == [], tenant
        assert (invoices[tenant].net, invoices[tenant].total) == (Decimal("30.00"), Decimal("31.80")), tenant
    # acme is not registered, but its contract's credit stays: ¥150 usable in March covers the ¥30
    assert credits(invoices["acme"]) == [("acme-onboarding", Decimal("-30.00"))]
    assert invoices["acme"].total == Decimal("0.00")

    # April: delta resumed gets the trial it never spent; gamma spent all of it in March
    set_status(db, "delta", ACTIVE)
    for tenant in ("gamma", "delta"):
        rent(db, tenant, APRIL, 20)  # 20 s × ¥1 = ¥20.00
    run_period(db, RULES, APRIL, now=NOW)
    assert credits(load_invoice(db, "delta", APRIL)) == [("trial", Decimal("-10.00"))]
    assert credits(load_invoice(db, "gamma", APRIL)) == []

    # a re-run of March changes nothing, whatever the registry says now
    add_tenant(db, "ghost", "Ghost")
    assert run_period(db, RULES, MARCH, now=NOW).created == []
    assert credits(load_invoice(db, "ghost", MARCH)) == []


def test_unknown_lists_unregistered_usage_and_the_gauges_count_it(db):
    add_tenant(db, "gamma", "Gamma")
    rent(db, "gamma", MARCH, 30)
    # ghost: 45 s × ¥1 = ¥45.00 rent; 45 s × 1000 W = 4.5e7 mJ × 1.12 × ¥330 / 3.6e9 = ¥4.62 → charges ¥49.62
    rent(db, "ghost", MARCH, 45, energy_mw=1_000_000)
    rent(db, "spook", MARCH, 10)  # ¥10.00
    rent(db, "bad id", MARCH, 5)  # rated before ids were checked: listed as not well-formed
    rent(db, "ghost", APRIL, 7)

    found = unregistered_usage(db, RULES, MARCH)
    assert [(u.tenant, u.well_formed, u.rented_seconds, u.energy_mj, u.charges) for u in found] == [
        ("ghost", True, 45, 45_000_000, Decimal("45.00") + Decimal("4.62")),
        ("spook", True, 10, 0, Decimal("10.00")),
        ("bad id", False, 5, 0, Decimal("5.00")),
    ]
    counts = unregistered_counts(db, APRIL, MARCH)
    assert counts == {MARCH: (3, 45 + 10 + 5), APRIL: (1, 7)}

    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.unregistered(counts, APRIL, MARCH)
    sample = registry.get_sample_value
    assert sample("gpubill_unregistered_tenants", {"period": "current"}) == 1
    assert sample("gpubill_unregistered_tenants", {"period": "previous"}) == 3
    assert sample("gpubill_unregistered_rented_seconds", {"period": "previous"}) == 60
    metrics.unregistered({}, "2026-05", APRIL)  # a period without any reads 0, not the last value
    assert sample("gpubill_unregistered_tenants", {"period": "current"}) == 0

    add_tenant(db, "ghost", "Ghost")  # registering takes it off both lists
    assert [u.tenant for u in unregistered_usage(db, RULES, MARCH)] == ["spook", "bad id"]
    assert unregistered_counts(db, APRIL, MARCH) == {MARCH: (2, 15)}


def test_no_tenant_id_is_ever_a_metric_label():
    registry = CollectorRegistry()
    Metrics(registry).unregistered({MARCH: (5, 100)}, MARCH, "2026-02")
    labels = {key for metric in registry.collect() for sample in metric.samples for key in sample.labels}
    assert "tenant" not in labels


# -------------------------------------------------------------------------- the migration's backfill


def test_the_backfill_registers_invoiced_tenants_in_the_id_syntax_once(tmp_path):
    with open_database(f"chdb://{tmp_path / 'ch'}", migrate=False) as database:
        migrations.apply(database)  # every migration, the registry's included
        database.command("DROP TABLE tenants")
        database.command("DROP VIEW v_unregistered_usage")
        issued = datetime(2026, 4, 3, 2, 0, tzinfo=UTC)
        header = ("number", "year", "seq", "tenant", "period", "status", "issued_at", "currency", "subtotal",
                  "credit_used", "net", "tax", "total", "vat_rate")
        rows = [(f"GB-2026-{i:06d}", 2026, i, tenant, period, "finalized", issued, "CNY", Decimal(0), Decimal(0),
                 Decimal(0), Decimal(0), Decimal(0), Decimal("0.06"))
                for i, (tenant, period) in enumerate([("old", "2026-02"), ("old", "2026-03"), ("bad/id", "2026-03"),
                                                      ("kept", "2026-03")], start=1)]
        database.insert("invoices", rows, header)
        (_, _, sql), = [m for m in migrations.migrations() if m[0] == 11]
        statements = migrations.split_statements(sql)
        database.command(statements[0])  # the table
        for _, _, later in migrations.migrations():  # its later columns (0019: the buyer)
            for statement in migrations.split_statements(later):
                if statement.split()[:3] == ["ALTER", "TABLE", "tenants"]:
                    database.command(statement)
        add_tenant(database, "kept", "Kept Ltd")  # registered by hand before the backfill runs
        set_status(database, "kept", SUSPENDED)
        for _ in range(2):  # run twice: the second changes nothing
            for statement in statements:
                database.command(statement)
        tenants = {t.tenant: t for t in list_tenants(database)}
        assert sorted(tenants) == ["kept", "old"]  # "bad/id" is not an id: left for the operator
        assert (tenants["old"].display_name, tenants["old"].status) == ("old", ACTIVE)
        assert tenants["old"].note.startswith("registered by migration 0011")
        assert (tenants["kept"].display_name, tenants["kept"].status) == ("Kept Ltd", SUSPENDED)
        assert database.query("SELECT count() FROM tenants WHERE tenant = 'old'")[0][0] == 1


# -------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("args, fragment", [
    (["add", "/", "--name", "x"], "tenant id '/'"),
    (["add", "..", "--name", "x"], "tenant id '..'"),
    (["add", "a\x00b", "--name", "x"], "x00b' is not an id"),  # shown escaped, never as the character
    (["add", "a\nb", "--name", "x"], "nb' is not an id"),
    (["add", "\u202eacme", "--name", "x"], "RIGHT-TO-LEFT OVERRIDE): ids are ASCII"),
    (["add", "a" * 300, "--name", "x"], "300 characters long"),
    (["add", "", "--name", "x"], "tenant id is empty"),
    (["add", "\u0430cme", "--name", "x"], "CYRILLIC SMALL LETTER A): ids are ASCII letters, digits, '.', '_' and '-' (a look-alike"),
    (["add", "acme", "--name", "evil\u202eexe"], "RIGHT-TO-LEFT OVERRIDE"),
    (["add", "acme", "--name", "a\nb"], "U+000A"),
    (["add", "acme", "--name", ""], "display name is empty"),
    (["add", "acme", "--name", "x" * 300], "300 characters long: at most 100"),
    (["suspend", "../x"], "tenant id '../x'"),
    (["list", "--status", "[red]gone"], "--status: '[red]gone' is not one of active, suspended"),
    (["unknown", "--period", "2026-13"], "--period"),
])
def test_the_command_line_refuses_hostile_input_in_one_line_before_opening_anything(
        args, fragment, tmp_path, monkeypatch, capsys):
    from gpubill.cli import main

    monkeypatch.setenv("GPUBILL_CLICKHOUSE", f"chdb://{tmp_path / 'never'}")
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.setattr(sys, "argv", ["gpubill", "tenant", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], captured.err
    assert_one_printable_line(lines[0])
    assert not (tmp_path / "never").exists()  # refused before the database was opened


# -------------------------------------------------------------------------- the demo


def test_the_demo_registers_every_tenant_its_simulated_fleet_rents_to():
    from gpubill.demo import DEMO_MODELS, DEMO_TENANTS
    from gpubill.devenv.simulator import simulate_fleet

    # the demo's call, on 3 nodes for 30 minutes: every lease goes to one of its tenants
    readings = simulate_fleet(gpus=24, gpu_model=DEMO_MODELS[0], models=DEMO_MODELS, minutes=30, start=1_772_294_400,
                              tenants=len(DEMO_TENANTS), site="gz-guian", seed=2026)
    rented = {r["tenant"] for r in readings if r["kind"] == "usage" and r["tenant"]}
    assert rented and rented <= set(DEMO_TENANTS)
    for tenant, name in DEMO_TENANTS.items():
        assert check_tenant_id(tenant) == tenant and check_display_name(name) == name
