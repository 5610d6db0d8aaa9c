"""The incremental audit (reports/audit.py, reports/audit_hours.py, issue 26 item 4): after a clean
audit, an untouched period recomputes no hour, and each tampering the other audit tests plant —
raw readings changed, rated rows changed, a rollup row changed, a correction added, the rules
changed — is found by the incremental audit as by `--full`, with the same differences; an hour
found to differ is never stored as clean, so it is found again the next time.

Two cards, both at 1000 W (1,000,000 mJ a second), in two UTC hours of March 2026 (Asia/Shanghai):
G1 rented by acme for 600 s from 01:00Z (monthly A800: ¥3180 over March's 2,678,400 s), G2 by beta
for 300 s from 02:00Z (no contract: list price ¥10/h). Energy: mJ / 3.6e9 kWh × PUE 1.12 × ¥0.33.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules, round_fen
from reports.audit import Difference, Figures, audit_period
from schemas.corrections import parse_correction
from schemas.events import PowerReading, UsageReading
from streams.corrections_sync import take_corrections
from streams.kafka.corrections import LoggedCorrection
from streams.rating.reference import Outcome, Rater
from streams.sink import ClickHouseSink
from tests.chdb_template import migrated_dsn
from usage.rollup import roll_up
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

RULES = load_rules(DEFAULT_RULES_DIR)
PERIOD = "2026-03"
H0 = 1_772_323_200 + 3600  # 2026-03-01T01:00:00Z
H1 = H0 + 3600  # 02:00Z
HOURS = 31 * 24  # March in Asia/Shanghai: 744 hours
MJ = 1_000_000  # a second at 1000 W
KWH_PRICE = Fraction("1.12") * Fraction("0.33") / 3_600_000_000  # yuan per mJ


def acme_rent(seconds: int) -> Fraction:
    return Fraction(3180) * seconds / 2_678_400


def beta_rent(seconds: int, hourly: int = 10) -> Fraction:
    return Fraction(hourly) * seconds / 3600


def figures(seconds: int, mj: int, rent: Fraction) -> Figures:
    return Figures(seconds, mj, round_fen(rent), round_fen(mj * KWH_PRICE))


# acme: 600 s, ¥0.7123… → 0.71, 600,000,000 mJ = 1/6 kWh → ¥0.0616 → 0.06;
# beta: 300 s, ¥0.8333… → 0.83, 1/12 kWh → ¥0.0308 → 0.03
CLEAN = {"acme": figures(600, 600 * MJ, acme_rent(600)), "beta": figures(300, 300 * MJ, beta_rent(300))}


def differences(raw: dict[str, Figures], rated: dict[str, Figures]) -> list[Difference]:
    """What the audit lists for these figures: per tenant in order, each field that differs."""
    out = []
    for tenant in sorted(set(raw) | set(rated)):
        a, b = raw.get(tenant, Figures()), rated.get(tenant, Figures())
        for what in ("rent_seconds", "energy_mj", "rent", "electricity"):
            if getattr(a, what) != getattr(b, what):
                out.append(Difference(tenant, what, getattr(a, what), getattr(b, what)))
    return out


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def readings() -> list:
    out = []
    for gpu, tenant, start, seconds in (("G1", "acme", H0, 600), ("G2", "beta", H1, 300)):
        for second in range(start, start + seconds):
            common = {"ts": iso(second), "site": "gz-guian", "node": "n1", "gpu_uuid": gpu}
            out.append(UsageReading.model_validate({
                "kind": "usage", "event_id": f"{gpu}-u-{second}", **common, "gpu_model": "A800-80G",
                "tenant": tenant, "instance": "i-1", "util_pct": 50, "mem_used_mib": 1}))
            out.append(PowerReading.model_validate({
                "kind": "power", "event_id": f"{gpu}-p-{second}", **common, "power_w": 1000}))
    return out


def write_and_roll_up(db) -> None:
    out, rater = Outcome(), Rater(RULES)
    for offset, reading in enumerate(readings()):
        rater.rate(reading, 0, offset, datetime.fromtimestamp(H1 + 86_400, UTC), out)
    ClickHouseSink(db).write(out)
    time.sleep(0.01)  # the rollup takes hours whose last write is older than the margin (0 here)
    assert [h for _, h in roll_up(db, RULES, period=PERIOD).hours] == [H0, H1]


@pytest.fixture()
def db(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    with open_database(migrated_dsn(tmp_path / "db")) as database:
        write_and_roll_up(database)
        yield database


def test_a_clean_audit_is_stored_and_an_untouched_period_recomputes_no_hour(db) -> None:
    first = audit_period(db, RULES, PERIOD)
    assert (first.mode, first.hours, first.recomputed, first.taken, first.stored) == (
        "incremental", HOURS, HOURS, 0, HOURS)  # nothing stored yet: every hour, all clean
    assert (first.figures, first.differences) == (CLEAN, [])

    again = audit_period(db, RULES, PERIOD)
    assert (again.recomputed, again.taken, again.stored) == (0, HOURS, 0)
    assert (again.figures, again.differences) == (CLEAN, [])  # summed from the stored hours, rounded once

    full = audit_period(db, RULES, PERIOD, full=True)
    assert (full.mode, full.recomputed, full.taken, full.stored) == ("full", HOURS, 0, HOURS)
    assert (full.figures, full.differences) == (CLEAN, [])


def test_a_change_that_changes_no_figure_recomputes_its_hour_only_and_stores_it_again(db) -> None:
    audit_period(db, RULES, PERIOD)
    # a second power reading of a second G1 already has, later in the partition: the first counts
    # (a second more than 10 s from the hour's edges: a power reading counts in every hour within
    # 10 s of it, counter energy reads that far)
    db.command("INSERT INTO readings_power SELECT * REPLACE ('again' AS event_id, src_offset + 100000 AS src_offset, "
               f"power_mw * 3 AS power_mw) FROM readings_power WHERE gpu_uuid = 'G1' AND second = toDateTime({H0 + 37}, 'UTC')")
    found = audit_period(db, RULES, PERIOD)
    assert (found.recomputed, found.taken, found.stored, found.differences) == (1, HOURS - 1, 1, [])
    assert audit_period(db, RULES, PERIOD).recomputed == 0


def _usage_reattributed_in_place(db) -> None:
    db.command(f"ALTER TABLE readings_usage UPDATE tenant = 'beta' WHERE gpu_uuid = 'G1' "
               f"AND second < toDateTime({H0 + 60}, 'UTC') SETTINGS mutations_sync = 1")


def _power_doubled_in_place(db) -> None:
    db.command(f"ALTER TABLE readings_power UPDATE power_mw = power_mw * 2 WHERE gpu_uuid = 'G2' "
               f"AND second = toDateTime({H1 + 30}, 'UTC') SETTINGS mutations_sync = 1")


def _rated_second_added(db) -> None:
    """A rated second no reading supports, stamped as every writer does: the hour is read live."""
    db.command("INSERT INTO rated_seconds SELECT * REPLACE ('GHOST' AS gpu_uuid) FROM (SELECT * FROM rated_seconds "
               f"WHERE gpu_uuid = 'G1' AND stream = 'rent' AND second = toDateTime({H0 + 5}, 'UTC'))")
    assert db.query("SELECT count() FROM rated_seconds WHERE gpu_uuid = 'GHOST'") == [(1,)]
    stamp_hours(db, [(PERIOD, H0)])


def _rated_second_changed_under_its_rollup(db) -> None:
    db.command(f"ALTER TABLE rated_seconds UPDATE energy_mj = energy_mj + 5 WHERE gpu_uuid = 'G1' "
               f"AND stream = 'energy' AND second = toDateTime({H0 + 5}, 'UTC') SETTINGS mutations_sync = 1")


def _rollup_row_changed(db) -> None:
    db.command("ALTER TABLE rated_hours UPDATE seconds = seconds + 1 WHERE tenant = 'beta' AND stream = 'rent' "
               "SETTINGS mutations_sync = 1")


def _correction_stored(db) -> None:
    """acme's G1 reattributed to beta for its first 120 s, stored as the worker's sync stores it."""
    now_s = H1 + 86_400
    raw = json.dumps({"kind": "reattribute", "event_id": "c-1", "gpu_uuid": "G1", "from": iso(H0), "to": iso(H0 + 120),
                      "tenant": "beta", "reason": "test", "author": "os:finance"}).encode()
    take_corrections(db, [LoggedCorrection(0, 0, now_s * 1000, parse_correction(raw, now_s), "ok", "", raw)],
                     now_s + 40 * 86_400)


TAMPERINGS = [
    # (plant, hours recomputed, differences): the raw side first, then the rated side
    pytest.param(_usage_reattributed_in_place, 1, differences(  # G1's first minute is beta's, energy with it
        {"acme": figures(540, 540 * MJ, acme_rent(540)),  # ¥0.641… → 0.64; 0.15 kWh → ¥0.0554 → 0.06 (same)
         "beta": figures(360, 360 * MJ, beta_rent(360))},  # ¥1.00; 0.1 kWh → ¥0.037 → 0.04
        CLEAN), id="raw usage updated"),
    pytest.param(_power_doubled_in_place, 1, differences(  # one second of 2000 W: 1,000,000 mJ more
        {"acme": CLEAN["acme"], "beta": figures(300, 301 * MJ, beta_rent(300))}, CLEAN), id="raw power updated"),
    pytest.param(_rated_second_added, 1, differences(  # 601 s: ¥0.7135… → 0.71, unchanged
        CLEAN, {"acme": figures(601, 600 * MJ, acme_rent(601)), "beta": CLEAN["beta"]}), id="rated row added"),
    pytest.param(_rated_second_changed_under_its_rollup, 1,  # reports read the rollup: only the rollup check sees it
                 [Difference("", "rollup of hour 2026-03-01T01:00Z", "2 groups", "2 groups")], id="rated row updated"),
    pytest.param(_rollup_row_changed, 1, [Difference("", "rollup of hour 2026-03-01T02:00Z", "2 groups", "2 groups")]
                 + differences(CLEAN, {"acme": CLEAN["acme"], "beta": figures(301, 300 * MJ, beta_rent(301))}),
                 id="rollup row updated"),  # 301 s: ¥0.8361… → 0.84
    pytest.param(_correction_stored, 1, differences(  # the raw side applies it, the rated data was not re-rated
        {"acme": figures(480, 480 * MJ, acme_rent(480)),  # ¥0.5698… → 0.57; 2/15 kWh → ¥0.0493 → 0.05
         "beta": figures(420, 420 * MJ, beta_rent(420))},  # ¥1.1666… → 1.17; 7/60 kWh → ¥0.0431 → 0.04
        CLEAN), id="correction stored"),
]


@pytest.mark.parametrize(("plant", "recomputed", "expected"), TAMPERINGS)
def test_each_tampering_after_a_clean_audit_is_found_by_both_modes(db, plant, recomputed, expected) -> None:
    assert audit_period(db, RULES, PERIOD).stored == HOURS
    plant(db)
    assert expected  # a tampering the audit must find

    found = audit_period(db, RULES, PERIOD)
    assert found.differences == expected
    assert (found.recomputed, found.taken, found.stored) == (recomputed, HOURS - recomputed, 0)
    full = audit_period(db, RULES, PERIOD, full=True)
    assert (full.differences, full.figures) == (expected, found.figures)
    assert full.stored == HOURS - recomputed  # the differing hour is not stored, the others are
    # never stored as clean: recomputed, and found, again
    again = audit_period(db, RULES, PERIOD)
    assert (again.differences, again.recomputed) == (expected, recomputed)


def test_changed_rules_recompute_every_hour(db, tmp_path) -> None:
    assert audit_period(db, RULES, PERIOD).stored == HOURS
    shutil.copytree(DEFAULT_RULES_DIR, tmp_path / "rules")
    catalog = tmp_path / "rules" / "catalog.toml"
    text = catalog.read_text(encoding="utf-8")
    assert text.count("hourly = 10.00") == 1
    catalog.write_text(text.replace("hourly = 10.00", "hourly = 12.00"), encoding="utf-8")
    dearer = load_rules(tmp_path / "rules")

    found = audit_period(db, dearer, PERIOD)

    # beta's 300 s at the new list price ¥12/h: ¥1.00 from the raw side, ¥0.83 as rated
    expected = [Difference("beta", "rent", round_fen(beta_rent(300, 12)), Decimal("0.83"))]
    assert (found.differences, found.recomputed, found.taken) == (expected, HOURS, 0)
    assert audit_period(db, dearer, PERIOD, full=True).differences == expected
    # back to the old rules: the hours last found clean under the new ones are recomputed, beta's hour
    # (which differed under the new rules, so was not stored) is still the old rules' clean one
    back = audit_period(db, RULES, PERIOD)
    assert (back.differences, back.recomputed, back.taken) == ([], HOURS - 1, 1)


def test_the_command_says_which_mode_ran(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    path = tmp_path / "db"
    with open_database(migrated_dsn(path)) as database:
        write_and_roll_up(database)
    env = {**os.environ, "GPUBILL_CLICKHOUSE": f"chdb://{path}", "GPUBILL_RULES": str(DEFAULT_RULES_DIR),
           "GPUBILL_ROLLUP_MARGIN_S": "0", "NO_COLOR": "1"}

    def run(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "gpubill.cli", "audit", "--period", PERIOD, "--offline", *extra], env=env,
                              cwd=Path(__file__).parent, capture_output=True, text=True, timeout=300)

    runs = [run(), run(), run("--full")]
    assert [r.returncode for r in runs] == [0, 0, 0], runs[0].stdout + runs[0].stderr
    assert [line for r in runs for line in r.stdout.splitlines() if line.startswith("audit mode: ")] == [
        "audit mode: incremental — 744 of 744 hours recomputed, 0 taken from the last clean audit; 744 stored as clean",
        "audit mode: incremental — 0 of 744 hours recomputed, 744 taken from the last clean audit; 0 stored as clean",
        "audit mode: full — 744 of 744 hours recomputed; 744 stored as clean",
    ]
    assert all("audit of 2026-03: clean" in r.stdout for r in runs)


def test_a_power_reading_within_10_s_of_an_hours_edge_recomputes_both_hours(db) -> None:
    # counter energy: the energy of H1's last seconds before it may come from a reading at H1 + 3
    audit_period(db, RULES, PERIOD)
    db.command(f"ALTER TABLE readings_power UPDATE power_mw = power_mw + 1 WHERE gpu_uuid = 'G2' "
               f"AND second = toDateTime({H1 + 3}, 'UTC') SETTINGS mutations_sync = 1")
    found = audit_period(db, RULES, PERIOD)
    assert (found.recomputed, found.taken) == (2, HOURS - 2)
