"""Archive → verify → retention on the embedded ClickHouse, and the attacks on each step.

March 2026 in the test rules' billing time zone (Asia/Shanghai) is [2026-02-28T16:00Z,
2026-03-31T16:00Z): it shares UTC partition 202602 with February and 202603 with April, so
retention must delete inside those partitions and leave the neighbours' rows alone.

Rows written directly (no broker): three cards, the same 300 seconds of March each —
120 s from the period's first second, 60 s on 2026-03-10, 120 s up to its last second —
and 60 s of February and of April around it:

    GA1  A800-80G acme hourly  ¥3600/h = ¥1/s     1000 W  = 1,000,000 mJ/s
    GR1  RTX4090  beta monthly ¥2,678,400 / 2,678,400 s (31 d) = ¥1/s, 10 % discount   400.5 W
    GA2  A800-80G not rented (its energy is unallocated; its model only in its usage readings)   300 W
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from billing_rules import load_rules
from usage import rated
from reports.archive import (
    MANIFEST,
    ArchiveError,
    Checksum,
    file_checksum,
    read_manifest,
    verify_archive,
    write_archive,
)
from billing.invoicing import load_invoice, run_period
from reports.cost_share import cost_share
from reports.retention import RetentionRefused, apply_retention, periods_due
from reports.usage_report import usage_report
from schemas.tables import (
    PIPELINE_TABLES,
    RATED_SECONDS,
    READINGS_POWER,
    READINGS_USAGE,
)
from tests.chdb_template import migrated_dsn
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES = load_rules(Path(__file__).parents[1] / "e2e" / "rules")
PERIOD = "2026-03"
LO, HI = RULES.period_bounds(PERIOD)
MID = 1_773_100_800  # 2026-03-10T00:00:00Z
MARCH_SECONDS = [*range(LO, LO + 120), *range(MID, MID + 60), *range(HI - 120, HI)]
NEIGHBOUR_SECONDS = [*range(LO - 60, LO), *range(HI, HI + 60)]  # February's last minute, April's first
NOW = datetime(2026, 4, 10, tzinfo=UTC)  # March closed: ended 03-31T16:00Z + 3 days' grace
CARDS = {  # card: (model, tenant, plan, price, divisor, discount %, watts as mW)
    "GA1": ("A800-80G", "acme", "hourly", Decimal(3600), 3600, Decimal(0), 1_000_000),
    "GR1": ("RTX4090", "beta", "monthly", Decimal(2_678_400), 2_678_400, Decimal(10), 400_500),
    "GA2": ("A800-80G", None, "", Decimal(0), 0, Decimal(0), 300_000),
}


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / 'ch')) as database:
        yield database


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    """Hours are rolled up and read from rollups as soon as they are written."""
    monkeypatch.setattr(writes, "MARGIN_S", 0)


def _at(second: int) -> datetime:
    return datetime.fromtimestamp(second, UTC)


def seed(db, seconds=MARCH_SECONDS + NEIGHBOUR_SECONDS, version: int = 1) -> None:
    """Raw readings and their rated seconds, as the pipeline writes them."""
    usage, power, rated_rows = [], [], []
    for offset, (card, (model, tenant, plan, price, per_s, pct, mw)) in enumerate(CARDS.items()):
        for second in seconds:
            period = RULES.period_of(second)
            position = {"src_partition": offset, "src_offset": second, "ingested_at": _at(second)}
            common = {"ts": _at(second).strftime("%Y-%m-%dT%H:%M:%SZ"), "second": _at(second), "site": "gz-guian",
                      "node": "gz-n1", "gpu_uuid": card, **position}
            usage.append({**common, "event_id": f"{card}-u-{second}", "gpu_model": model, "tenant": tenant,
                          "instance": f"i-{tenant}" if tenant else None, "util_pct": Decimal("90.5"),
                          "mem_used_mib": 40960})
            power.append({**common, "event_id": f"{card}-p-{second}", "power_mw": mw, "energy_mj": 0, "energy_epoch": ""})
            base = {c: 0 for c in RATED_SECONDS} | {
                "gpu_uuid": card, "second": _at(second), "period": period, "tenant": tenant or "",
                "instance": f"i-{tenant}" if tenant else "", "site": "gz-guian", "node": "gz-n1", "plan": "",
                "rent_price": Decimal(0), "discount_pct": Decimal(0), "util_pct": Decimal(0), "band": "",
                "tariff_per_kwh": Decimal(0), "pue": Decimal(0), "version": version, "measured": 0, "rated_at": _at(second),
                "gpu_model": model, **{k: v for k, v in position.items() if k != "ingested_at"}}
            if tenant:
                rated_rows.append(base | {"stream": "rent", "plan": plan, "rent_price": price, "rent_per_s": per_s,
                                          "discount_pct": pct, "util_pct": Decimal("90.5")})
            rated_rows.append(base | {"stream": "energy", "energy_mj": mw, "band": "flat",
                                      "tariff_per_kwh": Decimal(330), "pue": Decimal("1.12"),
                                      "gpu_model": model if tenant else ""})
    for table, columns, rows in (("readings_usage", READINGS_USAGE, usage), ("readings_power", READINGS_POWER, power),
                                 ("rated_seconds", RATED_SECONDS, rated_rows)):
        db.insert(table, [[row[c] for c in columns] for row in rows], columns)
    stamp_hours(db, {(row["period"], int(row["second"].timestamp()) // 3600 * 3600) for row in rated_rows})
    time.sleep(0.01)  # a rollup starts strictly after the writes' stamps


def per_second_rows(db, lo: int = LO, hi: int = HI, period: str = PERIOD) -> dict[str, int]:
    where = f"second >= toDateTime({lo}, 'UTC') AND second < toDateTime({hi}, 'UTC')"
    return {
        "rated_seconds": db.query("SELECT count() FROM rated_seconds FINAL WHERE period = {p:String}", {"p": period})[0][0],
        "readings_usage": db.query(f"SELECT count() FROM readings_usage FINAL WHERE {where}")[0][0],
        "readings_power": db.query(f"SELECT count() FROM readings_power FINAL WHERE {where}")[0][0],
    }


def figures(db) -> dict:
    """Everything a customer or finance sees of March."""
    return {
        "invoices": {t: load_invoice(db, t, PERIOD) for t in ("acme", "beta")},
        "usage": {t: usage_report(db, RULES, t, PERIOD, now=NOW) for t in ("acme", "beta")},
        "cost_share": cost_share(db, RULES, PERIOD),
    }


def archived(db, tmp_path: Path) -> Path:
    """March seeded, invoiced, archived and verified; the archive's directory."""
    seed(db)
    run_period(db, RULES, PERIOD, now=NOW)
    out = tmp_path / "archive"
    write_archive(db, RULES, PERIOD, out)
    verify_archive(db, RULES, out)
    return out


# -------------------------------------------------------------------------- the whole path


def test_archive_verify_retention_leaves_invoices_and_reports_unchanged(db, tmp_path):
    seed(db)
    run_period(db, RULES, PERIOD, now=NOW)
    before = figures(db)
    # acme: 300 s × ¥1 = ¥300.00; 300 s × 1,000,000 mJ = 3e8 mJ × 1.12 × ¥330 / 3.6e9 = ¥30.80
    # beta: 300 s × ¥1 = ¥300.00, discount −¥30.00; 300 × 400,500 mJ = 120,150,000 mJ → ¥12.3354 → 12.34
    lines = {t: [(line.kind, line.amount) for line in inv.lines if line.kind != "credit"]
             for t, inv in before["invoices"].items()}
    assert lines == {"acme": [("rent", Decimal("300.00")), ("electricity", Decimal("30.80"))],
                     "beta": [("rent", Decimal("300.00")), ("electricity", Decimal("12.34")),
                              ("discount", Decimal("-30.00"))]}
    neighbours = (per_second_rows(db, LO - 60, LO, "2026-02"), per_second_rows(db, HI, HI + 60, "2026-04"))
    # 3 cards × 300 s of readings each; rated: rent for 2 cards + energy for 3 = 5 rows a second
    assert per_second_rows(db) == {"rated_seconds": 1500, "readings_usage": 900, "readings_power": 900}

    summary = write_archive(db, RULES, PERIOD, tmp_path / "archive")
    # the hours 02-28T16Z, 03-10T00Z and 03-31T15Z, for each of the three tables
    assert summary.files == 9 and summary.rows == {"rated_seconds": 1500, "readings_usage": 900, "readings_power": 900}
    manifest, sha = read_manifest(tmp_path / "archive")
    assert sha == summary.manifest_sha256
    assert sorted(f["path"] for f in manifest["files"] if f["table"] == "readings_power") == [
        "readings_power/20260228T16.parquet", "readings_power/20260310T00.parquet", "readings_power/20260331T15.parquet"]
    first = tmp_path / "archive" / "rated_seconds" / "20260228T16.parquet"
    assert pq.ParquetFile(first).metadata.row_group(0).column(0).compression == "ZSTD"
    assert pq.read_table(first).column_names == list(RATED_SECONDS)

    with pytest.raises(RetentionRefused, match="no verified archive"):
        apply_retention(db, RULES, PERIOD, now=NOW)  # written is not verified
    verified = verify_archive(db, RULES, tmp_path / "archive")
    assert (verified.files, verified.rows, verified.against_db) == (9, 3300, True)

    result = apply_retention(db, RULES, PERIOD, now=NOW)
    assert (result.status, result.rows) == ("dropped", summary.rows)
    assert per_second_rows(db) == {"rated_seconds": 0, "readings_usage": 0, "readings_power": 0}
    assert (per_second_rows(db, LO - 60, LO, "2026-02"), per_second_rows(db, HI, HI + 60, "2026-04")) == neighbours
    assert rated.coverage(db, RULES, PERIOD).frozen == ()

    # a re-run of the invoice run creates nothing; every figure is what it was
    rerun = run_period(db, RULES, PERIOD, now=NOW)
    assert (rerun.created, len(rerun.existing)) == ([], 2)
    assert figures(db) == before

    # the archive still verifies, from its files alone; retention again is a no-op
    assert verify_archive(db, RULES, tmp_path / "archive").against_db is False
    assert apply_retention(db, RULES, PERIOD, now=NOW).status == "already dropped"


def test_an_interrupted_drop_is_finished_by_running_retention_again(db, tmp_path):
    out = archived(db, tmp_path)
    _, sha = read_manifest(out)
    # as if the process died after marking the period (step 5) and before dropping (step 7)
    db.insert("retention_runs", [[PERIOD, str(out), sha, NOW]], ["period", "archive", "manifest", "dropped_at"])
    result = apply_retention(db, RULES, PERIOD, now=NOW)
    assert (result.status, result.rows) == ("dropped", {"rated_seconds": 1500, "readings_usage": 900,
                                                        "readings_power": 900})
    assert per_second_rows(db) == {"rated_seconds": 0, "readings_usage": 0, "readings_power": 0}


def test_a_write_between_the_checks_and_the_mark_unmarks_and_refuses(db, tmp_path, monkeypatch):
    from reports import retention

    archived(db, tmp_path)
    checks = iter([[], ["the database's readings_power rows of 2026-03 differ from the archive: 903 rows"]])
    monkeypatch.setattr(retention, "database_differences", lambda *_: next(checks))  # moved after the first check
    with pytest.raises(RetentionRefused, match="903 rows"):
        apply_retention(db, RULES, PERIOD, now=NOW)
    assert rated.retained_periods(db) == set()
    assert per_second_rows(db) == {"rated_seconds": 1500, "readings_usage": 900, "readings_power": 900}


def test_a_dropped_period_needs_its_archive_no_more_to_say_so(db, tmp_path):
    out = archived(db, tmp_path)
    apply_retention(db, RULES, PERIOD, now=NOW)
    shutil.rmtree(out)  # moved to cold storage
    assert apply_retention(db, RULES, PERIOD, now=NOW).status == "already dropped"


def test_rows_written_after_retention_are_left_alone_and_named(db, tmp_path):
    archived(db, tmp_path)
    apply_retention(db, RULES, PERIOD, now=NOW)
    seed(db, [MID + 3600])  # a late reading of March, after its rows were dropped
    assert rated.coverage(db, RULES, PERIOD).frozen == (MID + 3600,)
    with pytest.raises(RetentionRefused, match="5 rows of rated_seconds were written after retention"):
        apply_retention(db, RULES, PERIOD, now=NOW)
    assert per_second_rows(db)["rated_seconds"] == 5


# -------------------------------------------------------------------------- refusals


def test_retention_refuses_a_period_that_is_not_closed_or_not_invoiced(db, tmp_path):
    seed(db)
    with pytest.raises(RetentionRefused, match="not closed until 2026-04-03T16:00Z"):
        apply_retention(db, RULES, PERIOD, now=datetime(2026, 4, 2, tzinfo=UTC))
    with pytest.raises(RetentionRefused, match="2026-03 is not invoiced"):
        apply_retention(db, RULES, PERIOD, now=NOW)
    assert per_second_rows(db)["rated_seconds"] == 1500


def test_retention_refuses_hours_not_rolled_up(db, monkeypatch):
    seed(db)
    run_period(db, RULES, PERIOD, now=NOW)
    seed(db, [MID + 7200])  # written now: within the margin, so not rolled up yet
    monkeypatch.setattr(writes, "MARGIN_S", 3600)
    with pytest.raises(RetentionRefused, match="hours not rolled up"):
        apply_retention(db, RULES, PERIOD, now=NOW)


def test_retention_refuses_when_the_database_moved_on_since_the_archive(db, tmp_path):
    archived(db, tmp_path)
    seed(db, [MID + 60])  # late data: 3 usage + 3 power readings, 5 rated rows
    with pytest.raises(RetentionRefused, match="rated_seconds rows of 2026-03 differ from the archive: 1505 rows"):
        apply_retention(db, RULES, PERIOD, now=NOW)
    assert per_second_rows(db)["readings_usage"] == 903


def test_retention_refuses_rows_rewritten_since_the_archive(db, tmp_path):
    archived(db, tmp_path)
    seed(db, [MID], version=2)  # the same keys re-rated (say, a late usage reading): same count, other rows
    with pytest.raises(RetentionRefused, match="other content than the archive"):
        apply_retention(db, RULES, PERIOD, now=NOW)


def test_retention_refuses_an_archive_changed_after_its_verification(db, tmp_path):
    out = archived(db, tmp_path)
    victim = out / "readings_usage" / "20260310T00.parquet"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(RetentionRefused, match="20260310T00.parquet: sha256 differs"):
        apply_retention(db, RULES, PERIOD, now=NOW)
    manifest = out / MANIFEST
    manifest.write_text(manifest.read_text().replace('"created_at"', '"created_at" ', 1))
    with pytest.raises(RetentionRefused, match="manifest.json changed since it was verified"):
        apply_retention(db, RULES, PERIOD, now=NOW)
    assert per_second_rows(db)["readings_usage"] == 900


def test_the_retention_policy_picks_periods_older_than_the_latest_n(db):
    seed(db)
    # now December 2026: keeping 9 periods keeps April … December, so March is due, February too
    assert periods_due(db, RULES, 9, datetime(2026, 12, 1, tzinfo=UTC)) == ["2026-02", "2026-03"]
    assert periods_due(db, RULES, 10, datetime(2026, 12, 1, tzinfo=UTC)) == ["2026-02"]


# -------------------------------------------------------------------------- attacks on the archive


def test_archive_refuses_a_directory_that_is_not_empty(db, tmp_path):
    seed(db)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(ArchiveError, match="not an empty directory"):
        write_archive(db, RULES, PERIOD, tmp_path / "full")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["notes.txt"]
    with pytest.raises(ArchiveError, match="not an empty directory"):
        write_archive(db, RULES, PERIOD, tmp_path / "full" / "notes.txt")


def test_rows_changing_while_archiving_fail_the_archive_and_leave_nothing_behind(db, tmp_path, monkeypatch):
    from reports import archive

    seed(db)
    real = archive.file_checksum

    def one_row_short(*args, **kwargs):  # as if a late row arrived after this hour's file was written
        found = real(*args, **kwargs)
        return Checksum(found.rows - 1, found.sum)

    monkeypatch.setattr(archive, "file_checksum", one_row_short)
    with pytest.raises(ArchiveError, match="rated_seconds rows of 2026-03 changed while archiving"):
        write_archive(db, RULES, PERIOD, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArchiveError, match="changed while archiving"):
        write_archive(db, RULES, PERIOD, tmp_path / "empty")
    assert list((tmp_path / "empty").iterdir()) == []  # it was there before: kept, emptied


def test_a_period_that_is_not_a_month_is_refused_before_anything_is_written(db, tmp_path):
    with pytest.raises(ArchiveError, match="billing period must be YYYY-MM"):
        write_archive(db, RULES, "2026-03'; DROP TABLE rated_seconds; --", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_command_line_refuses_a_period_that_is_not_a_month(tmp_path):
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "archive", "--period", "2026-03'; DROP",
                           "--out", str(tmp_path / "out")], check=False, capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200",
                               "PYTHONPATH": str(Path(__file__).parents[2])}, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "is not a month like 2026-03" in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


def edit_manifest(directory: Path, change) -> None:
    manifest = json.loads((directory / MANIFEST).read_text())
    change(manifest)
    (directory / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "rated_seconds/../../x.parquet",
                                  "readings_usage/20260310T00.parquet"])  # another table's name for the file
def test_a_manifest_path_that_leaves_the_archive_is_refused(db, tmp_path, path):
    out = archived(db, tmp_path)
    edit_manifest(out, lambda m: m["files"][0].update(path=path))
    with pytest.raises(ArchiveError, match="not a valid manifest"):
        verify_archive(db, RULES, out)


def test_a_manifest_type_that_smuggles_sql_is_refused(db, tmp_path):
    out = archived(db, tmp_path)
    edit_manifest(out, lambda m: m["tables"]["readings_usage"]["columns"][0].__setitem__(1, "String DEFAULT (SELECT 1)"))
    with pytest.raises(ArchiveError, match="not a valid manifest"):
        verify_archive(db, RULES, out)


def test_verify_names_a_tampered_missing_or_unlisted_file_and_a_count_mismatch(db, tmp_path):
    out = archived(db, tmp_path)
    copies = {name: shutil.copytree(out, tmp_path / name) for name in ("tampered", "missing", "unlisted", "count")}
    victim = Path(copies["tampered"]) / "readings_power" / "20260331T15.parquet"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0x01
    victim.write_bytes(bytes(data))
    (Path(copies["missing"]) / "rated_seconds" / "20260310T00.parquet").unlink()
    shutil.copy(Path(copies["unlisted"]) / "rated_seconds" / "20260310T00.parquet",
                Path(copies["unlisted"]) / "rated_seconds" / "20260310T01.parquet")
    edit_manifest(Path(copies["count"]), lambda m: m["files"][0].update(rows=m["files"][0]["rows"] + 1))
    expected = {"tampered": "20260331T15.parquet: sha256 differs", "missing": "20260310T00.parquet: missing",
                "unlisted": "20260310T01.parquet: in the archive but not in its manifest",
                "count": "rows, the manifest says"}
    for name, message in expected.items():
        with pytest.raises(ArchiveError, match=message):
            verify_archive(db, RULES, Path(copies[name]))


def test_verify_reads_the_rows_back_and_finds_other_rows_with_a_matching_sha256(db, tmp_path):
    # a forger rewrites a file with one value changed and puts its new sha256 into the manifest:
    # only the content checksum, computed by ClickHouse from the rows read back, can tell
    out = archived(db, tmp_path)
    victim = out / "readings_power" / "20260310T00.parquet"
    table = pq.read_table(victim)
    watts = table.column("power_mw").to_pylist()
    watts[0] += 1
    pq.write_table(table.set_column(table.column_names.index("power_mw"), "power_mw",
                                    __import__("pyarrow").array(watts, table.schema.field("power_mw").type)), victim)
    import hashlib

    sha = hashlib.sha256(victim.read_bytes()).hexdigest()
    edit_manifest(out, lambda m: [f.update(sha256=sha) for f in m["files"] if f["path"].endswith("power/20260310T00.parquet")])
    with pytest.raises(ArchiveError, match="its rows read back differ from the manifest's content checksum"):
        verify_archive(db, RULES, out)


def test_verify_without_a_manifest_says_the_archive_is_unfinished(db, tmp_path):
    (tmp_path / "half").mkdir()
    with pytest.raises(ArchiveError, match="no manifest.json; not an archive, or its writing did not finish"):
        verify_archive(db, RULES, tmp_path / "half")


def test_a_server_reads_the_files_back_through_a_scratch_table_to_the_same_checksum(db, tmp_path):
    out = archived(db, tmp_path)
    columns = [(c.name, c.type) for c in PIPELINE_TABLES["rated_seconds"].columns]
    path = out / "rated_seconds" / "20260228T16.parquet"
    by_file, by_loading = file_checksum(db, path, columns), file_checksum(db, path, columns, load=True)
    assert by_file == by_loading and by_file.rows == 120 * 5
    assert by_file == Checksum(600, int(next(f["checksum"] for f in read_manifest(out)[0]["files"]
                                             if f["path"] == "rated_seconds/20260228T16.parquet")))
    assert not [name for (name,) in db.query("SHOW TABLES") if name.startswith("archive_check_")]


def test_the_whole_path_through_a_server_that_cannot_see_the_files(tmp_path):
    # ClickHouse's HTTP interface (the chDB gateway, as a server): Parquet comes back as bytes,
    # and every file is read back through a scratch table rather than file()
    from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway

    port = free_port()
    gateway = start_gateway(tmp_path, port)
    try:
        with open_database(gateway.dsn) as db:
            assert not db.embedded
            out = archived(db, tmp_path)
            assert apply_retention(db, RULES, PERIOD, now=NOW).status == "dropped"
            assert per_second_rows(db) == {"rated_seconds": 0, "readings_usage": 0, "readings_power": 0}
            assert verify_archive(db, RULES, out).against_db is False
    finally:
        stop_gateway(gateway)
