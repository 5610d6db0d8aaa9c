"""Archive → verify → retention on real parts: readings through a real broker and `gpubill worker
--drain` into chDB, then every command as a user runs it, as a child process.

The fixture (tests/e2e/fixtures/make_readings.py) has March and April 2026 readings on both
sides of the March/April edge in Asia/Shanghai (2026-03-31T16:00Z), so March's seconds and
April's first ones share the UTC partition 202603 of the raw tables: retention of March must
delete inside it and leave April alone. After March's per-second rows are gone, its invoices,
usage reports and cost share are what they were, and April is invoiced to the fen as in
tests/e2e/test_pipeline_e2e.py.
"""

from __future__ import annotations

import json
import shutil
from decimal import Decimal

import pytest

from tests.e2e.conftest import FIXTURES

pytestmark = pytest.mark.e2e

MARCH = "2026-03"
LO, HI = 1_772_294_400, 1_774_972_800  # March in Asia/Shanghai: [02-28T16:00Z, 03-31T16:00Z)


def per_second_rows(database, lo: int, hi: int, period: str) -> tuple[int, int, int]:
    where = f"second >= toDateTime({lo}, 'UTC') AND second < toDateTime({hi}, 'UTC')"
    return (
        database.query("SELECT count() FROM rated_seconds FINAL WHERE period = {p:String}", {"p": period})[0][0],
        database.query(f"SELECT count() FROM readings_usage FINAL WHERE {where}")[0][0],
        database.query(f"SELECT count() FROM readings_power FINAL WHERE {where}")[0][0],
    )


def one_line_error(done) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), (done.stdout, done.stderr)
    return lines[0]


def test_archive_verify_retention_leaves_a_period_as_it_was(gpubill, tmp_path):
    gpubill.env["GPUBILL_ROLLUP_MARGIN_S"] = "0"  # `gpubill rollup` rolls up what was just written
    for part in ("readings_part1.ndjson", "readings_part2.ndjson"):
        gpubill.run("replay", str(FIXTURES / part))
        gpubill.run("worker", "--drain")
    for tenant in ("acme", "beta"):  # registered, as in test_pipeline_e2e.py: beta spends the trial credit
        gpubill.run("tenant", "add", tenant, "--name", tenant.title())
    gpubill.run("invoice", "run", "--period", MARCH)
    gpubill.run("rollup")

    def figures() -> dict:
        found = {
            "invoices": {t: gpubill.json("invoice", "show", "--period", MARCH, "--tenant", t, "--format", "json")
                         for t in ("acme", "beta")},
            "cost_share": gpubill.json("report", "cost-share", "--period", MARCH, "--format", "json"),
        }
        for tenant in ("acme", "beta"):
            out = tmp_path / f"usage-{tenant}.json"
            gpubill.run("report", "usage", "--tenant", tenant, "--period", MARCH, "--format", "json", "--out", str(out))
            report = json.loads(out.read_text())
            report.pop("generated_at")
            found[f"usage {tenant}"] = report
        return found

    before = figures()
    assert before["invoices"]["beta"]["total"] == "49.26"  # as tests/e2e/test_pipeline_e2e.py works it out
    assert sum(Decimal(r["rent"]) for r in before["usage acme"]["rows"]) == Decimal(120)

    from warehouse.connection import open_database

    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as database:
        # acme 120 s, beta 60 s of rent; energy of GA1 120 s, GR1 60 s, GA2 60 s; 30 s of GA2's usage (no tenant)
        assert per_second_rows(database, LO, HI, MARCH) == (180 + 240, 120 + 60 + 30, 120 + 60 + 60)
        april = per_second_rows(database, HI, HI + 86_400, "2026-04")
    assert april[1] > 0  # April's first seconds, in the same UTC partition as March's last

    # -- archive; not twice into the same directory; no retention before a verification
    archive = tmp_path / "march-archive"
    done = gpubill.run("archive", "--period", MARCH, "--out", str(archive))
    assert "next: gpubill archive verify" in done.stdout
    assert (archive / "manifest.json").is_file() and len(list(archive.glob("*/*.parquet"))) == 3 * 1  # one hour each
    assert "not an empty directory" in one_line_error(
        gpubill.run("archive", "--period", MARCH, "--out", str(archive), check=False))
    assert "no verified archive" in one_line_error(gpubill.run("retention", "apply", "--period", MARCH, check=False))
    assert "is not a month" in one_line_error(
        gpubill.run("archive", "--period", "2026-03'; DROP TABLE rated_seconds; --", "--out", str(tmp_path / "x"),
                    check=False))
    assert not (tmp_path / "x").exists()

    # -- verify: one line, exit 0; a tampered copy: one line, exit 1
    verified = gpubill.run("archive", "verify", str(archive))
    assert verified.stdout.count("\n") == 1 and verified.stdout.startswith(f"ok: {MARCH}, 3 files, 870 rows")
    tampered = shutil.copytree(archive, tmp_path / "tampered")
    victim = next(tampered.glob("readings_usage/*.parquet"))
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    assert "sha256 differs from the manifest" in one_line_error(
        gpubill.run("archive", "verify", str(tampered), check=False))

    # -- retention: off by default; a policy run for what is not archived is refused, names why
    assert "retention is off" in gpubill.run("retention", "apply").stdout
    gpubill.run("invoice", "run", "--period", "2026-04")
    policy = gpubill.run("retention", "apply", "--keep-periods", "1", "--dry-run", check=False)
    assert policy.returncode == 1 and f"{MARCH}: would drop" in policy.stdout
    assert "2026-04: refused: 2026-04 has no verified archive" in policy.stderr

    dropped = gpubill.run("retention", "apply", "--period", MARCH)
    assert f"{MARCH}: dropped (rated_seconds 420, readings_usage 210, readings_power 240)" in dropped.stdout
    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as database:
        assert per_second_rows(database, LO, HI, MARCH) == (0, 0, 0)
        assert per_second_rows(database, HI, HI + 86_400, "2026-04") == april

    # -- March reads as it did; a re-run of its invoice run changes nothing
    assert "0 invoices created, 2 already final" in gpubill.run("invoice", "run", "--period", MARCH).stdout
    assert figures() == before
    assert "files only" in gpubill.run("archive", "verify", str(archive)).stdout
    assert "already dropped" in gpubill.run("retention", "apply", "--period", MARCH).stdout
    audited = gpubill.run("audit", "--period", MARCH)
    assert "clean — no rows written after retention" in audited.stdout and "from rollups" in audited.stdout

    # -- April, invoiced before March's rows went, to the fen (tests/e2e/test_pipeline_e2e.py, step 4):
    #    beta 100 s × ¥31/30 = 103.33, −10.33 discount, 4.11 electricity, VAT 5.83 → 102.94
    beta4 = gpubill.json("invoice", "show", "--period", "2026-04", "--tenant", "beta", "--format", "json")
    assert (beta4["subtotal"], beta4["net"], beta4["tax"], beta4["total"]) == ("107.44", "97.11", "5.83", "102.94")
