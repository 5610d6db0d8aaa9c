"""Output is safe (issue 13): hostile text from the stream reaches no terminal, file name or
spreadsheet as anything but text, and every file is written with the configured mode.

Pure parts first (terminal text, CSV cells, file names, modes), then the commands on an
embedded ClickHouse seeded with hostile tenants, sites and dead letters, run as a user runs
them (a child process), whose stdout and stderr must hold no raw control character.
"""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit.cli_run import UNLOGGED_CLI
from rich.console import Console
from rich.table import Table

from billing_rules import InvoiceLine
from reports.outputs import check_file_mode, dir_mode, output_name, path_inside, write_output
from reports.render import render_cost_share, render_invoice, render_usage
from reports.render.format import csv_cell, terminal_text
from reports.usage_model import UsageReport, UsageRow

HOSTILE = ["[/x]", "[bold red]", "\x1b]0;pwned\x07", "\r", "a\rb", "\x1b[2J", "x\\", ":fire:"]
RULES_DIR = Path(__file__).parents[1] / "e2e" / "rules"


def shown(text: str) -> str:
    """What a reader must see for `text` (worked out apart from terminal_text): C0 and DEL as \\xNN,
    a backslash doubled."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 or ord(c) == 0x7F else "\\\\" if c == "\\" else c
                   for c in text)


def printed(markup: object) -> str:
    console = Console(file=io.StringIO(), width=400, color_system=None, emoji=False)
    console.print(markup, highlight=False)
    return console.file.getvalue()


def raw_controls(text: str) -> set[str]:
    return {c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0}


# --- terminal text ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [*HOSTILE, "\u202eevil", "bell\x07", "nul\x00", "del\x7f", "c1\x9b31m"])
def test_terminal_text_prints_exactly_what_is_there(value):
    out = printed(f"tenant {terminal_text(value)} done")
    assert not raw_controls(out)
    expected = shown(value).replace("\x9b", "\\x9b").replace("\u202e", "\\u202e")
    assert out == f"tenant {expected} done\n"


def test_terminal_text_in_a_table_cell_and_cut_without_breaking_an_escape():
    table = Table("tenant")
    table.add_row(terminal_text("[/x]\x1b[2J" * 10, limit=9))
    out = printed(table)
    assert "[/x]\\x1b[" in out and "\x1b" not in out


def test_terminal_text_of_a_plain_id_is_the_id():
    assert terminal_text("acme-01.gpu_2") == "acme-01.gpu_2"
    assert terminal_text(None) == ""


# --- CSV cells --------------------------------------------------------------------------


@pytest.mark.parametrize(("cell", "expected"), [
    ("=1+1", "'=1+1"),
    ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
    ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
    ("@SUM(A1)", "'@SUM(A1)"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("\x00x", "'\x00x"),
    ("-1.00", "-1.00"),  # a number: finance sums it
    ("-10", "-10"),
    ("12.345678", "12.345678"),
    ("-", "'-"),
    ("-1.00 =1", "'-1.00 =1"),
    ("gpu-1", "gpu-1"),
    ("a=b", "a=b"),
    ("", ""),
])
def test_csv_cell(cell, expected):
    assert csv_cell(cell) == expected


def test_csv_cell_leaves_non_text_alone():
    assert csv_cell(5) == 5 and csv_cell(None) is None


def _usage(instance: str, gpu_uuid: str) -> UsageReport:
    row = UsageRow(day="2026-03-05", instance=instance, gpu_uuid=gpu_uuid, gpu_model="A800-80G",
                   gpu_hours=Decimal("1.5"), avg_util_pct=Decimal("50"), kwh=Decimal("2"),
                   rent=Decimal("3.00"), electricity=Decimal("1.00"))
    return UsageReport(tenant="acme", period="2026-03", generated_at="2026-04-01T00:00:00Z", rows=(row,))


def test_usage_csv_escapes_formulas_from_the_readings():
    data = render_usage(_usage("=HYPERLINK(\"http://x\")", "+cmd|' /C calc'!A0"), "csv")
    row = next(csv.DictReader(io.StringIO(data.decode())))
    assert row["instance"] == "'=HYPERLINK(\"http://x\")"
    assert row["gpu_uuid"] == "'+cmd|' /C calc'!A0"
    assert row["rent"] == "3.00" and row["gpu_hours"] == "1.500000"


def _invoice(description: str, amount: str, site: str = "gz-guian"):
    line = InvoiceLine(kind="adjustment", site=site, band="flat", ref_period="2026-02", description=description,
                       quantity=Decimal(-1), unit="kWh", unit_price=Decimal(1), amount=Decimal(amount),
                       exact_amount=Fraction(amount), gpu_model=None, plan=None, pue=None)
    total = Decimal(amount)
    return SimpleNamespace(tenant="acme", period="2026-03", number="GB-2026-000001", status="finalized",
                           issued_at="2026-04-01T00:00:00Z", currency="CNY", lines=[line], subtotal=total,
                           net=total, tax=Decimal(0), total=total, vat_rate=Decimal("0.06"))


def test_invoice_csv_keeps_negative_amounts_as_numbers_and_escapes_text():
    data = render_invoice(_invoice("=cmd|' /C calc'!A0", "-1.00", site="@evil"), "csv").decode()
    rows = list(csv.DictReader(io.StringIO(data)))
    assert rows[0]["description"] == "'=cmd|' /C calc'!A0"
    assert rows[0]["site"] == "'@evil"
    assert rows[0]["amount"] == "-1.00" and rows[0]["quantity"] == "-1.000000"
    assert [r["amount"] for r in rows[1:]] == ["-1.00", "0.00", "0.00", "-1.00", "0.00", "-1.00"]


def _share_row(site: str, model: str = "A800-80G") -> dict:
    return {"site": site, "gpu_model": model, "cards": 8, "rented_gpu_hours": Decimal(10),
            "rent_revenue": Decimal(100), "electricity_billed": Decimal(-5), "electricity_unallocated": Decimal(0),
            "electricity_share": Decimal("0.05"), "green_kwh": Decimal(0), "total_kwh": Decimal(1)}


def test_cost_share_csv_escapes_sites_and_keeps_negative_money():
    data = render_cost_share([_share_row("=1+1", "-cmd"), _share_row("ok")], "csv")
    rows = list(csv.DictReader(io.StringIO(data)))
    assert (rows[0]["site"], rows[0]["gpu_model"]) == ("'=1+1", "'-cmd")
    assert rows[0]["electricity_billed"] == "-5.00" and rows[1]["site"] == "ok"


@pytest.mark.parametrize("site", HOSTILE)
def test_cost_share_table_shows_hostile_sites_as_text(site):
    text = render_cost_share([_share_row(site, model=site)], "table")
    assert not raw_controls(text)
    assert text.count(shown(site)) == 2  # site and model
    compared = render_cost_share([_share_row(site, model=site)], "table", what_if=[_share_row(site) | {
        "what_if_site": site, "what_if_rent": Decimal(1), "what_if_electricity": Decimal(1), "saving": Decimal(1)}])
    assert not raw_controls(compared)  # 14 columns: long names are cut with "…", never read as markup
    assert compared.count(shown(site)[:4]) == 4  # two rows' sites, one model, one what-if site


# --- file names and modes ---------------------------------------------------------------

ODD_TENANTS = ["a/b", "..", "../../etc/passwd", "x" * 250, "nul\x00t", "", "/", ".hidden", "\x1b[2J", "é"]


@pytest.mark.parametrize("tenant", ODD_TENANTS)
def test_an_odd_tenant_gets_a_safe_name_inside_the_directory(tenant, tmp_path):
    name = output_name("GB-2026-000001", tenant, "2026-03", "pdf")
    assert "/" not in name and "\0" not in name and len(name.encode()) <= 255
    assert name.isascii() and name.isprintable()
    assert path_inside(tmp_path, name).parent == tmp_path.resolve()
    assert name == output_name("GB-2026-000001", tenant, "2026-03", "pdf")  # stable


def test_names_keep_ids_and_never_collide():
    assert output_name("GB-2026-000001", "acme", "2026-03", "json") == "GB-2026-000001_acme_2026-03.json"
    assert output_name("cost-share", None, "2026-03", "csv") == "cost-share_2026-03.csv"
    assert output_name(None, "acme", "2026-03", "csv") == "acme_2026-03.csv"
    names = {output_name("usage", t, "2026-03", "csv") for t in [*ODD_TENANTS, "acme", "a_b"]}
    assert len(names) == len(ODD_TENANTS) + 2
    with pytest.raises(ValueError, match="unknown output format"):
        output_name("usage", "acme", "2026-03", "exe")


def test_a_pdf_s_language_is_in_its_name():
    # issue 36: the English and Chinese PDFs of one invoice had one name (`curl -OJ` failed on the second)
    from reports.outputs import _LANGS
    from reports.render.i18n import LANGS

    assert _LANGS == LANGS
    pdfs = {output_name("GB-2026-000001", "acme", "2026-03", "pdf", lang=lang) for lang in LANGS}
    assert pdfs == {"GB-2026-000001_acme_2026-03.pdf", "GB-2026-000001_acme_2026-03.zh-CN.pdf"}
    # CSV and JSON are the same in every language: one name
    assert output_name("usage", "acme", "2026-03", "csv", lang="zh-CN") == "usage_acme_2026-03.csv"
    with pytest.raises(ValueError, match="unknown language"):
        output_name("usage", "acme", "2026-03", "pdf", lang="../x")


@pytest.mark.parametrize("name", ["../x", "a/b", "..", "", "/etc/passwd"])
def test_path_inside_refuses_names_that_leave(name, tmp_path):
    with pytest.raises(ValueError, match="leaves the output directory"):
        path_inside(tmp_path, name)


def test_path_inside_refuses_a_link_that_leaves(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "GB_acme.json").symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(ValueError):
        path_inside(tmp_path / "out", "GB_acme.json")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
@pytest.mark.parametrize("file_mode", [0o640, 0o600, 0o660])
def test_files_and_created_directories_get_the_mode_whatever_the_umask(tmp_path, umask, file_mode):
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    old = os.umask(umask)
    try:
        path = write_output(existing / "a" / "b" / "report.csv", "x,y\r\n", file_mode)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"x,y\r\n"
    assert mode_of(path) == file_mode
    expected_dir = file_mode | (0o100 if file_mode & 0o400 else 0) | (0o010 if file_mode & 0o040 else 0)
    assert mode_of(existing / "a") == mode_of(existing / "a" / "b") == expected_dir == dir_mode(file_mode)
    assert mode_of(existing) == 0o755  # not ours: left alone
    assert [p.name for p in (existing / "a" / "b").iterdir()] == ["report.csv"]  # no temporary left


def test_an_existing_file_is_replaced_with_the_mode_and_a_planted_link_is_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.csv").symlink_to(victim)
    (out / "old.csv").write_text("old")
    os.chmod(out / "old.csv", 0o666)
    write_output(out / "report.csv", b"new", 0o640)
    write_output(out / "old.csv", b"new", 0o640)
    assert victim.read_text() == "keep"
    assert not (out / "report.csv").is_symlink() and (out / "report.csv").read_bytes() == b"new"
    assert mode_of(out / "old.csv") == 0o640


@pytest.mark.parametrize("mode", [0o644, 0o666, 0o400, 0o200, 0o700, 0o1640, -1, "0640", True])
def test_file_modes_that_are_refused(mode):
    with pytest.raises(ValueError):
        check_file_mode(mode)


@pytest.mark.parametrize(("env", "expected"), [("0640", 0o640), ("0600", 0o600), ("0o660", 0o660), ("640", 0o640)])
def test_the_file_mode_setting_is_octal(monkeypatch, env, expected):
    from gpubill.config import load_settings

    monkeypatch.setenv("GPUBILL_FILE_MODE", env)
    assert load_settings().file_mode == expected


@pytest.mark.parametrize("env", ["0644", "0755", "abc", "", "0o9", "1000"])
def test_a_bad_file_mode_setting_is_one_clear_error(monkeypatch, env):
    from gpubill.config import load_settings
    from gpubill.errors import ConfigError

    monkeypatch.setenv("GPUBILL_FILE_MODE", env)
    with pytest.raises(ConfigError, match="GPUBILL_FILE_MODE"):
        load_settings()


def test_the_default_file_mode_is_0640(monkeypatch):
    from gpubill.config import load_settings

    monkeypatch.delenv("GPUBILL_FILE_MODE", raising=False)
    assert load_settings().file_mode == 0o640


# --- the commands, on an embedded database with hostile data ---------------------------

# Tenants as the stream may deliver them: markup, terminal escapes, path parts, NUL, 250 characters.
TENANTS = ["acme", "[/x]", "[bold red]", "\x1b]0;pwned\x07", "\r", "a/b", "..", "x" * 250, "nul\x00t"]
SITE = "[/x]\x1b[2J"  # an unknown site, in energy rows nobody rents
MID = 1_773_100_800  # 2026-03-10T00:00:00Z
SECONDS = range(MID, MID + 60)


def _at(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)


def seed(db) -> None:
    """Per card (one per tenant): 60 s of A800 hourly rent (¥3600/h = ¥1/s) and 1000 W, raw and rated;
    one unrented card at SITE; dead letters whose reason and bytes are hostile."""
    from billing_rules import load_rules
    from schemas.tables import RATED_SECONDS, READINGS_POWER, READINGS_USAGE
    from warehouse.writes import stamp_hours

    rules = load_rules(RULES_DIR)
    usage, power, rated = [], [], []
    cards = [(f"G{i}", tenant, "gz-guian") for i, tenant in enumerate(TENANTS)] + [("GX", None, SITE)]
    for offset, (card, tenant, site) in enumerate(cards):
        for second in SECONDS:
            position = {"src_partition": offset, "src_offset": second}
            common = {"ts": _at(second).strftime("%Y-%m-%dT%H:%M:%SZ"), "second": _at(second), "site": site,
                      "node": "n1", "gpu_uuid": card, **position, "ingested_at": _at(second)}
            base = {c: 0 for c in RATED_SECONDS} | {
                "gpu_uuid": card, "second": _at(second), "period": rules.period_of(second), "tenant": tenant or "",
                "instance": "=cmd|' /C calc'!A0", "site": site, "node": "n1", "plan": "", "rent_price": Decimal(0),
                "discount_pct": Decimal(0), "util_pct": Decimal(0), "band": "", "tariff_per_kwh": Decimal(0),
                "pue": Decimal(0), "version": 1, "measured": 0, "rated_at": _at(second), "gpu_model": "A800-80G" if tenant else "",
                **position}
            if tenant is not None:  # the unknown site's card has no raw readings: the audit cannot price them
                usage.append({**common, "event_id": f"{card}-u-{second}", "gpu_model": "A800-80G", "tenant": tenant,
                              "instance": "i-1", "util_pct": Decimal("90.5"), "mem_used_mib": 1})
                power.append({**common, "event_id": f"{card}-p-{second}", "power_mw": 1_000_000, "energy_mj": 0,
                              "energy_epoch": ""})
                rated.append(base | {"stream": "rent", "plan": "hourly", "rent_price": Decimal(3600),
                                     "rent_per_s": 3600, "util_pct": Decimal("90.5")})
            rated.append(base | {"stream": "energy", "energy_mj": 1_000_000, "band": "flat",
                                 "tariff_per_kwh": Decimal(330), "pue": Decimal("1.12")})
    for table, columns, rows in (("readings_usage", READINGS_USAGE, usage), ("readings_power", READINGS_POWER, power),
                                 ("rated_seconds", RATED_SECONDS, rated)):
        db.insert(table, [[row[c] for c in columns] for row in rows], columns)
    stamp_hours(db, {(row["period"], int(row["second"].timestamp()) // 3600 * 3600) for row in rated})
    dead_at = datetime(2026, 3, 10, tzinfo=UTC)
    db.insert("deadletters", [
        [f"gpu.readings.v1{HOSTILE[i]}", 0, i, 0, 0, f"bad tenant {value}", f'{{"tenant": "{value}"}}', dead_at]
        for i, value in enumerate(HOSTILE)
    ], ["source_topic", "source_partition", "source_offset", "source_line", "source_index", "reason", "original",
        "dead_at"])
    time.sleep(0.01)


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory) -> Path:
    from warehouse.connection import open_database

    path = tmp_path_factory.mktemp("hostile") / "ch"
    with open_database(f"chdb://{path}") as db:
        seed(db)
    return path


def gpubill(db_path: Path, cwd: Path, *args: str, file_mode: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPUBILL_CLICKHOUSE": f"chdb://{db_path}", "GPUBILL_RULES": str(RULES_DIR),
           "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1", "COLUMNS": "2000"}
    env.pop("GPUBILL_FILE_MODE", None)
    if file_mode:
        env["GPUBILL_FILE_MODE"] = file_mode
    return subprocess.run([sys.executable, UNLOGGED_CLI, *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def assert_nothing_raw(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr, done.stderr
    assert not raw_controls(done.stdout), done.stdout
    assert not raw_controls(done.stderr), done.stderr


def test_invoice_run_writes_every_tenants_files_and_prints_their_names_as_text(hostile_db, tmp_path):
    out = tmp_path / "out" / "invoices"
    done = gpubill(hostile_db, tmp_path, "invoice", "run", "--period", "2026-03", "--out", str(out), "--offline")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_nothing_raw(done)
    for tenant in TENANTS:
        assert shown(tenant) in done.stdout, tenant
    files = sorted(out.iterdir())
    assert len(files) == 3 * len(TENANTS)
    by_tenant: dict[str, set[str]] = {}
    for file in files:
        assert file.is_file() and not file.is_symlink() and mode_of(file) == 0o640
        by_tenant.setdefault(file.name.split("_")[0], set()).add(file.suffix)
    assert set(map(frozenset, by_tenant.values())) == {frozenset({".json", ".csv", ".pdf"})}
    tenants = {json.loads(f.read_text())["tenant"] for f in files if f.suffix == ".json"}
    assert tenants == set(TENANTS)
    assert mode_of(tmp_path / "out") == mode_of(out) == 0o750
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # nothing written beside it ("a/b", "..")


def test_invoice_run_and_show_with_mode_0600(hostile_db, tmp_path):
    done = gpubill(hostile_db, tmp_path, "invoice", "run", "--period", "2026-03", "--out", "inv", "--offline",
                   file_mode="0600")
    assert done.returncode == 0, done.stderr
    assert {mode_of(p) for p in (tmp_path / "inv").iterdir()} == {0o600} and mode_of(tmp_path / "inv") == 0o700
    shown_one = gpubill(hostile_db, tmp_path, "invoice", "show", "--period", "2026-03", "--tenant", "[bold red]",
                        "--format", "csv", "--out", "one/inv.csv", file_mode="0600")
    assert shown_one.returncode == 0, shown_one.stderr
    assert mode_of(tmp_path / "one" / "inv.csv") == 0o600 and mode_of(tmp_path / "one") == 0o700
    assert "wrote one/inv.csv" in shown_one.stderr


def test_audit_prints_hostile_tenants_and_differences_as_text(hostile_db, tmp_path):
    done = gpubill(hostile_db, tmp_path, "audit", "--period", "2026-03", "--offline")  # no broker here
    assert_nothing_raw(done)
    for tenant in TENANTS:
        assert shown(tenant) in done.stdout, tenant
    # the unknown site's energy is rated but has no raw readings: one difference, unallocated
    assert done.returncode == 1 and "DIFFERENCE (unallocated) energy_mj" in done.stdout, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1].startswith("error: audit of 2026-03:")


def test_dlq_list_shows_hostile_reasons_and_bytes_as_text(hostile_db, tmp_path):
    done = gpubill(hostile_db, tmp_path, "dlq", "list", "--limit", "50")
    assert done.returncode == 0, done.stderr
    assert_nothing_raw(done)
    for value in HOSTILE:
        assert f"bad tenant {shown(value)}" in done.stdout, value


def test_cost_share_table_shows_a_hostile_site_as_text(hostile_db, tmp_path):
    done = gpubill(hostile_db, tmp_path, "report", "cost-share", "--period", "2026-03")
    assert done.returncode == 0, done.stderr
    assert_nothing_raw(done)
    assert shown(SITE) in done.stdout
    csv_done = gpubill(hostile_db, tmp_path, "report", "cost-share", "--period", "2026-03", "--format", "csv",
                       "--out", "cs.csv")
    assert csv_done.returncode == 0 and mode_of(tmp_path / "cs.csv") == 0o640
    sites = {row["site"] for row in csv.DictReader(io.StringIO((tmp_path / "cs.csv").read_text()))}
    assert SITE in sites  # starts with "[": not a formula, written as it is


def test_usage_report_of_a_hostile_tenant_escapes_instances(hostile_db, tmp_path):
    done = gpubill(hostile_db, tmp_path, "report", "usage", "--tenant", "\x1b]0;pwned\x07", "--period", "2026-03",
                   "--out", "u.csv")
    assert done.returncode == 0, done.stderr
    assert_nothing_raw(done)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "u.csv").read_text())))
    assert rows and {r["instance"] for r in rows} == {"'=cmd|' /C calc'!A0"}


class _Screen(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_a_report_on_stdout_drives_no_terminal_but_a_pipe_gets_it_as_it_is(monkeypatch, tty):
    from gpubill.cli.common import emit

    screen = _Screen(tty)
    monkeypatch.setattr(sys, "stdout", screen)
    report = 'site,kwh\r\n"\x1b]0;pwned\x07\tx",-1.00\r\n'
    emit(report, None)
    if tty:
        assert screen.getvalue() == 'site,kwh\n"\\x1b]0;pwned\\x07\tx",-1.00\n'
    else:
        assert screen.getvalue() == report
