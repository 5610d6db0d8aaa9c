"""Every hour's energy graded, measured mJ and estimated mJ (issue 39 item 3; SPEC §4), from the
per-second rows (`rated_seconds.measured`) to every reader: the rollups (`rated_hours.measured_mj`),
re-rating, finance's views (v_rated_hours, v_energy_graded), the usage report and the cost share.

Rated rows are written directly (no broker), on 2026-03-10 (UTC; 08:00 and 09:00 in Shanghai):

    GPU-a, acme (A800-80G, instance i-1), hour H0 = 00:00Z:
        s 0..9    700,000 mJ each, measured          7,000,000 measured
        s 10..13  300,001 mJ each, estimated         1,200,004 estimated
        s 14      300,001 mJ estimated (version 1), then 650,000 mJ measured (version 2: a later
                  reading gave the counter's rise; FINAL keeps it)   +650,000 measured
    GPU-a, acme, hour H1 = 01:00Z:
        s 3600..3604  500,000 mJ each, measured      2,500,000 measured
    GPU-b, nobody (unallocated, no model), hour H0:
        s 0..3    250,000 mJ each, measured          1,000,000 measured
        s 4..5    123,457 mJ each, estimated           246,914 estimated
    acme also rents GPU-a for s 0..14 and 3600..3604 (rent rows: never measured)

so acme: H0 7,650,000 measured + 1,200,004 estimated = 8,850,004 mJ; H1 2,500,000 measured;
unallocated: H0 1,000,000 measured + 246,914 estimated = 1,246,914 mJ. kWh = mJ ÷ 3,600,000,000.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import time
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path

import pytest

import usage.rated as rated
from billing_rules import load_rules
from reports.audit import rollup_differences
from reports.cost_share import cost_share, what_if
from reports.render import render_cost_share
from reports.render.usage import render_usage
from reports.usage_report import usage_report
from schemas.tables import RATED_SECONDS
from tests.chdb_template import migrated_dsn
from tests.pdf_reading import pdf_text
from usage.regenerate import regenerate
from usage.rollup import roll_up
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES = load_rules(Path(__file__).parents[1] / "e2e" / "rules")
PERIOD = "2026-03"
T0 = 1_773_100_800  # 2026-03-10T00:00:00Z
H0, H1 = T0, T0 + 3600
NOW = datetime(2026, 4, 1, tzinfo=UTC)
KWH = 3_600_000_000  # mJ per kWh


def q6(x: Fraction) -> Decimal:
    """Half up to six decimals, written out here (not billing_rules' rounding)."""
    return (Decimal(x.numerator) / Decimal(x.denominator)).quantize(Decimal("0.000001"), rounding=ROUND_HALF_UP)


@pytest.fixture(autouse=True)
def no_margin(monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)


@pytest.fixture
def db(tmp_path):
    with open_database(migrated_dsn(tmp_path / "ch")) as database:
        yield database


def row(stream: str, gpu: str, second: int, tenant: str, *, mj: int = 0, measured: int = 0, version: int = 1,
        model: str = "A800-80G") -> list:
    """One rated row; energy rows carry the rules' energy rate of gz-guian at their second."""
    rate = RULES.energy_rate("gz-guian", second) if stream == "energy" else None
    values = {c: 0 for c in RATED_SECONDS} | {
        "stream": stream, "gpu_uuid": gpu, "second": datetime.fromtimestamp(second, UTC), "period": PERIOD,
        "tenant": tenant, "instance": "i-1" if tenant else "", "gpu_model": model if tenant else "",
        "site": "gz-guian", "node": "n1", "plan": "hourly" if stream == "rent" else "",
        "rent_price": Decimal(3600) if stream == "rent" else Decimal(0), "rent_per_s": 3600 if stream == "rent" else 0,
        "discount_pct": Decimal(0), "util_pct": Decimal(50) if stream == "rent" else Decimal(0), "energy_mj": mj,
        "band": rate.band if rate else "", "tariff_per_kwh": Decimal(rate.tariff_per_kwh) if rate else Decimal(0),
        "pue": Decimal(rate.pue) if rate else Decimal(0), "version": version, "src_partition": 0,
        "src_offset": second, "rated_at": datetime.now(UTC), "measured": measured,
    }
    return [values[c] for c in RATED_SECONDS]


def write(db, rows: list[list]) -> None:
    db.insert("rated_seconds", rows, RATED_SECONDS)
    stamp_hours(db, {(PERIOD, int(r[RATED_SECONDS.index("second")].timestamp()) // 3600 * 3600) for r in rows})
    time.sleep(0.01)  # a rollup starts strictly after the writes' stamps


def seed(db) -> None:
    rows = [row("rent", "GPU-a", H0 + s, "acme") for s in range(15)]
    rows += [row("rent", "GPU-a", H1 + s, "acme") for s in range(5)]
    rows += [row("energy", "GPU-a", H0 + s, "acme", mj=700_000, measured=1) for s in range(10)]
    rows += [row("energy", "GPU-a", H0 + s, "acme", mj=300_001) for s in range(10, 15)]
    rows += [row("energy", "GPU-a", H1 + s, "acme", mj=500_000, measured=1) for s in range(5)]
    rows += [row("energy", "GPU-b", H0 + s, "", mj=250_000, measured=1) for s in range(4)]
    rows += [row("energy", "GPU-b", H0 + s, "", mj=123_457) for s in range(4, 6)]
    write(db, rows)
    write(db, [row("energy", "GPU-a", H0 + 14, "acme", mj=650_000, measured=1, version=2)])


# (tenant, hour) → (energy_mj, measured_mj), from the module docstring
EXPECTED = {("acme", H0): (8_850_004, 7_650_000), ("acme", H1): (2_500_000, 2_500_000), ("", H0): (1_246_914, 1_000_000)}


def graded_source(db) -> dict:
    source, params = rated.rated_source(db, RULES, PERIOD)
    return {(t, int(h)): (int(e), int(m)) for t, h, e, m in db.query(
        f"SELECT tenant, toUnixTimestamp(hour), sum(energy_mj), sum(measured_mj) FROM {source} "
        "WHERE stream = 'energy' GROUP BY tenant, hour", params)}


def test_rollups_keep_the_grade_and_every_read_sees_it_live_or_rolled_up(db):
    seed(db)
    assert rated.coverage(db, RULES, PERIOD).live == (H0, H1)
    assert graded_source(db) == EXPECTED  # grouped from the per-second rows
    roll_up(db, RULES)
    cov = rated.coverage(db, RULES, PERIOD)
    assert cov.live == () and cov.rolled == 2
    published = {(t, int(h)): (int(e), int(m)) for t, h, e, m in db.query(
        "SELECT tenant, toUnixTimestamp(hour), sum(energy_mj), sum(measured_mj) FROM rated_hours "
        "WHERE stream = 'energy' GROUP BY tenant, hour")}
    assert published == EXPECTED
    assert db.query("SELECT sum(measured_mj) FROM rated_hours WHERE stream = 'rent'")[0][0] == 0
    assert graded_source(db) == EXPECTED  # read from the rollups
    assert rollup_differences(db, RULES, cov) == []  # the audit's check of the rollups counts the grade


def test_a_rollup_whose_grade_differs_from_the_per_second_rows_is_found_by_the_audit(db):
    seed(db)
    roll_up(db, RULES)
    db.command("ALTER TABLE rated_hours UPDATE measured_mj = 0 WHERE tenant = '' SETTINGS mutations_sync = 1")
    cov = rated.coverage(db, RULES, PERIOD)
    assert [d.what for d in rollup_differences(db, RULES, cov)] == [f"rollup of hour 2026-03-10T00:00Z"]


@pytest.mark.parametrize("rolled", [False, True])
def test_finance_views_grade_every_hour(db, rolled):
    seed(db)
    if rolled:
        roll_up(db, RULES)
    hours = {(t, int(h)): (int(e), int(m)) for t, h, e, m in db.query(
        "SELECT tenant, toUnixTimestamp(hour), sum(energy_mj), sum(measured_mj) FROM v_rated_hours "
        "WHERE stream = 'energy' GROUP BY tenant, hour")}
    assert hours == EXPECTED
    graded = {(r["tenant"], int(r["hour"].timestamp())): r for r in db.query_dicts(
        "SELECT * FROM v_energy_graded WHERE period = '2026-03'")}
    assert set(graded) == set(EXPECTED)
    for key, (energy, measured) in EXPECTED.items():
        r = graded[key]
        assert (r["site"], r["energy_mj"], r["measured_mj"], r["estimated_mj"]) == (
            "gz-guian", energy, measured, energy - measured)
    # shares, half up to six decimals: 7,650,000 / 8,850,004 = 0.86440638…; 1; 1,000,000 / 1,246,914 = 0.80197992…
    assert graded[("acme", H0)]["measured_share"] == q6(Fraction(7_650_000, 8_850_004)) == Decimal("0.864406")
    assert graded[("acme", H1)]["measured_share"] == Decimal("1.000000")
    assert graded[("", H0)]["measured_share"] == q6(Fraction(1_000_000, 1_246_914)) == Decimal("0.801980")


def test_the_usage_report_splits_each_hour_into_measured_and_estimated_it_kwh(db):
    seed(db)
    roll_up(db, RULES)
    hourly = usage_report(db, RULES, "acme", PERIOD, granularity="hour", now=NOW)
    # H0: 7,650,000 mJ = 0.002125 kWh measured (exact); 1,200,004 mJ = 0.000333334… → 0.000333 estimated
    # H1: 2,500,000 mJ = 0.000694444… → 0.000694 measured, nothing estimated
    assert [(r.hour, r.measured_it_kwh, r.estimated_it_kwh) for r in hourly.rows] == [
        ("2026-03-10T08:00:00+08:00", q6(Fraction(7_650_000, KWH)), q6(Fraction(1_200_004, KWH))),
        ("2026-03-10T09:00:00+08:00", q6(Fraction(2_500_000, KWH)), Decimal(0))]
    assert (hourly.rows[0].measured_it_kwh, hourly.rows[1].measured_it_kwh) == (Decimal("0.002125"), Decimal("0.000694"))
    # the day: 10,150,000 mJ = 0.00281944… → 0.002819 measured; 0.000333 estimated; the hours add up to it
    daily = usage_report(db, RULES, "acme", PERIOD, now=NOW)
    (day,) = daily.rows
    assert (day.measured_it_kwh, day.estimated_it_kwh) == (q6(Fraction(10_150_000, KWH)), q6(Fraction(1_200_004, KWH)))
    assert hourly.totals.measured_it_kwh == daily.totals.measured_it_kwh == Decimal("0.002819")
    # billed kWh (after PUE 1.12) is unchanged by the grade: 11,350,004 mJ × 1.12 / 3.6e9 = 0.003531112… → 0.003531
    assert day.kwh == q6(Fraction(11_350_004, KWH) * Fraction("1.12"))

    rows = list(csv.DictReader(io.StringIO(render_usage(hourly, "csv").decode())))
    assert [(r["hour"], r["kwh"], r["measured_it_kwh"], r["estimated_it_kwh"]) for r in rows] == [
        ("2026-03-10T08:00:00+08:00", "0.002753", "0.002125", "0.000333"),
        ("2026-03-10T09:00:00+08:00", "0.000778", "0.000694", "0.000000")]
    # (billed kWh as before: 8,850,004 × 1.12 / 3.6e9 = 0.0027533…, 2,500,000 × 1.12 / 3.6e9 = 0.0007777…, shared
    # out of the invoice line's 0.003531: the floors 0.002753 + 0.000777 need one unit more, to the larger remainder)
    doc = json.loads(render_usage(daily, "json"))
    assert (doc["rows"][0]["measured_it_kwh"], doc["rows"][0]["estimated_it_kwh"]) == ("0.002819", "0.000333")
    assert (doc["totals"]["measured_it_kwh"], doc["totals"]["estimated_it_kwh"]) == ("0.002819", "0.000333")
    assert list(doc["rows"][0])[-2:] == ["measured_it_kwh", "estimated_it_kwh"]  # after the columns there were
    # the PDF states both totals, in each language
    assert "IT energy before PUE: 0.002819 kWh measured by the cards' energy counters, 0.000333 kWh estimated" \
        in pdf_text(render_usage(daily, "pdf"))
    assert "设备电量（未计 PUE）：0.002819 kWh 由 GPU 电能计数器计量，0.000333 kWh 按功率读数估算" \
        in pdf_text(render_usage(daily, "pdf", lang="zh-CN"))
    # and per row the share measured, of the row's kWh as written: 0.002819 / (0.002819 + 0.000333) = 0.89435… → 89.4 %;
    # per hour 0.002125 / 0.002458 = 0.86452… → 86.5 % and 0.000694 / 0.000694 → 100.0 %
    assert "89.4 %" in pdf_text(render_usage(daily, "pdf"))
    hourly_text = pdf_text(render_usage(hourly, "pdf", lang="zh-CN"))
    assert "86.5 %" in hourly_text and "100.0 %" in hourly_text and "实测占比" in hourly_text


def test_the_cost_share_grades_the_cards_it_energy(db):
    seed(db)
    roll_up(db, RULES)
    rows = {(r["site"], r["gpu_model"]): r for r in cost_share(db, RULES, PERIOD)}
    a800, unknown = rows[("gz-guian", "A800-80G")], rows[("gz-guian", "(unknown)")]
    # acme's card: 10,150,000 mJ measured → 0.002819 kWh; 1,200,004 estimated → 0.000333
    assert (a800["measured_it_kwh"], a800["estimated_it_kwh"]) == (
        q6(Fraction(10_150_000, KWH)), q6(Fraction(1_200_004, KWH))) == (Decimal("0.002819"), Decimal("0.000333"))
    # the unallocated card: 1,000,000 mJ → 0.000277777… → 0.000278; 246,914 mJ → 0.0000685872… → 0.000069
    assert (unknown["measured_it_kwh"], unknown["estimated_it_kwh"]) == (Decimal("0.000278"), Decimal("0.000069"))
    compared = what_if(db, RULES, PERIOD, list(rows.values()), other_site="gz-guian")
    assert {(r["gpu_model"], r["measured_it_kwh"]) for r in compared} == {
        ("A800-80G", Decimal("0.002819")), ("(unknown)", Decimal("0.000278"))}
    parsed = list(csv.DictReader(io.StringIO(render_cost_share(list(rows.values()), "csv", what_if=compared))))
    assert {(r["gpu_model"], r["measured_it_kwh"], r["estimated_it_kwh"]) for r in parsed} == {
        ("A800-80G", "0.002819", "0.000333"), ("(unknown)", "0.000278", "0.000069")}
    doc = json.loads(render_cost_share(list(rows.values()), "json"))
    assert {(r["gpu_model"], r["measured_it_kwh"]) for r in doc["rows"]} == {
        ("A800-80G", "0.002819"), ("(unknown)", "0.000278")}
    # the table shows the measured share: (0.002819 + 0.000278) / (0.002819 + 0.000278 + 0.000333 + 0.000069)
    # = 0.003097 / 0.003499 = 0.88511… → 88.51 %
    assert "88.51 %" in render_cost_share(list(rows.values()), "table")


def tariff_halved_rules(tmp_path: Path, effective_from: str):
    """The test rules with gz-guian's tariff halved (¥330 → ¥165/kWh) from `effective_from` (local)."""
    directory = tmp_path / "rules"
    shutil.copytree(Path(__file__).parents[1] / "e2e" / "rules", directory)
    sites = directory / "sites.toml"
    sites.write_text(sites.read_text() + f"""
[[site.gz-guian.tariff]]
effective_from = {effective_from}
bands = [
  {{ name = "flat", start = "00:00", end = "24:00", price_per_kwh = 165.00 }},
]
""")
    return load_rules(directory)


def test_re_rating_keeps_the_grade_of_re_priced_rows_and_hours(db, tmp_path):
    seed(db)
    roll_up(db, RULES)
    # from 08:00:05 local = H0 + 5 s: H0 changes rate inside (regrouped from its re-priced per-second
    # rows), H1 is re-priced whole (at the rollup grain, its per-second rows re-written)
    rules = tariff_halved_rules(tmp_path, "2026-03-10T08:00:05")
    done = regenerate(db, rules, PERIOD)
    assert done.hours == [H0, H1] and done.seconds_written > 0
    assert graded_source(db) == EXPECTED
    published = {(t, int(h)): (int(e), int(m)) for t, h, e, m in db.query(
        "SELECT tenant, toUnixTimestamp(hour), sum(energy_mj), sum(measured_mj) FROM rated_hours "
        "WHERE stream = 'energy' AND generation = {g:UInt64} GROUP BY tenant, hour", {"g": done.generation})}
    assert published == EXPECTED
    # each per-second energy row at ¥165 (re-written with a higher version) kept its grade
    repriced = {(g, int(s)): (int(m), int(v)) for g, s, m, v in db.query(
        "SELECT gpu_uuid, toUnixTimestamp(second), measured, version FROM rated_seconds FINAL "
        "WHERE stream = 'energy' AND tariff_per_kwh = 165")}
    assert len(repriced) == 10 + 5 + 1  # GPU-a: s 5..14 and H1's 5; GPU-b: s 5
    assert repriced == (  # (measured, version: the one it replaced + 1)
        {("GPU-a", H0 + s): (int(s < 10 or s == 14), 3 if s == 14 else 2) for s in range(5, 15)}
        | {("GPU-a", H1 + s): (1, 2) for s in range(5)} | {("GPU-b", H0 + 5): (0, 2)})
    assert regenerate(db, rules, PERIOD).generation == 0  # again: nothing changes


def test_finance_query_16_grades_each_day_as_finance_through_the_gateway(tmp_path):
    from tests.unit.test_ch_gateway import free_port, start_gateway, stop_gateway
    from tests.unit.test_finance_docs import queries

    with open_database(migrated_dsn(tmp_path / "clickhouse")) as database:
        seed(database)
        roll_up(database, RULES)
    gateway = start_gateway(tmp_path, free_port())
    try:
        with open_database(gateway.finance_dsn, migrate=False) as finance:
            found = {(r["tenant"], r["site"], str(r["day"])): r for r in finance.query_dicts(queries()[15])}
    finally:
        stop_gateway(gateway)
    # 2026-03-10 in Shanghai holds H0 and H1. acme: 10,150,000 mJ measured → 0.00281944… → 0.002819 kWh,
    # 1,200,004 mJ estimated → 0.000333; share 10,150,000 / 11,350,004 = 0.894272… → 0.8943.
    # unallocated: 1,000,000 → 0.000278; 246,914 → 0.0000685872… → 0.000069; 1,000,000 / 1,246,914 → 0.8020
    assert {k: (r["measured_kwh"], r["estimated_kwh"], r["measured_share"]) for k, r in found.items()} == {
        ("acme", "gz-guian", "2026-03-10"): (q6(Fraction(10_150_000, KWH)), q6(Fraction(1_200_004, KWH)),
                                             Decimal("0.8943")),
        ("", "gz-guian", "2026-03-10"): (Decimal("0.000278"), Decimal("0.000069"), Decimal("0.8020"))}


def test_a_corrected_card_hour_rated_again_from_its_readings_keeps_the_other_cards_grade(db):
    """A reattribution of GPU-c (no counter: estimated) inside H1 rates the card-hour again from its
    raw readings; the hour is published anew, and GPU-a's measured seconds in it keep their grade."""
    from schemas.tables import READINGS_POWER, READINGS_USAGE

    seed(db)
    seconds = range(H1 + 100, H1 + 110)
    at = datetime.fromtimestamp
    common = lambda s: {"ts": at(s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "second": at(s, UTC), "site": "gz-guian",  # noqa: E731
                        "node": "n1", "gpu_uuid": "GPU-c", "src_partition": 0, "src_offset": s,
                        "ingested_at": at(s, UTC)}
    db.insert("readings_usage", [[({**common(s), "event_id": f"u{s}", "gpu_model": "A800-80G", "tenant": "acme",
                                    "instance": "i-1", "util_pct": Decimal(50), "mem_used_mib": 1})[c]
                                  for c in READINGS_USAGE] for s in seconds], READINGS_USAGE)
    db.insert("readings_power", [[({**common(s), "event_id": f"p{s}", "power_mw": 400_000, "energy_mj": 0,
                                    "energy_epoch": ""})[c] for c in READINGS_POWER] for s in seconds], READINGS_POWER)
    write(db, [row("rent", "GPU-c", s, "acme") for s in seconds] + [row("energy", "GPU-c", s, "acme", mj=400_000)
                                                                    for s in seconds])
    roll_up(db, RULES)
    db.insert("corrections", [["c1", "reattribute", "GPU-c", at(H1 + 100, UTC), at(H1 + 110, UTC), "beta", None, "",
                               "wrong tenant", "test", "{}", 0, 0, NOW, NOW]],
              ["event_id", "kind", "gpu_uuid", "from_s", "to_s", "tenant", "instance", "stream", "reason", "author",
               "original", "src_partition", "src_offset", "produced_at", "stored_at"])
    done = regenerate(db, RULES, PERIOD)
    assert done.hours == [H1] and done.corrections == 1
    # H1: acme keeps GPU-a's 2,500,000 measured mJ; beta gets GPU-c's 10 × 400,000 = 4,000,000 mJ, estimated
    assert graded_source(db) == {**EXPECTED, ("beta", H1): (4_000_000, 0)}
