"""Retention: drop a period's per-second rows once rollups, invoices and a verified archive stand for them.

The per-second rows — `rated_seconds` and the raw readings `readings_usage`,
`readings_power` — are most of the database. Once a period is invoiced and rolled up, every
report of it reads the rollups (usage/rated.py), so those rows are needed only to
re-derive it, which an archive (reports/archive.py) can do. Retention never happens by
default: `gpubill retention apply --period P`, or GPUBILL_RETAIN_PERIODS for a policy.

`apply_retention(db, rules, period)`, step by step; any step that fails refuses with one
line naming what is missing (RetentionRefused) and drops nothing:

1. closed: the period's end plus the grace period has passed;
2. invoiced: `billing_runs` has a run of it;
3. rolled up: `roll_up` for the period, then no hour is read from the per-second rows
   (`coverage(...).live` empty), and every rollup equals the per-second rows grouped again
   (reports.audit.rollup_differences): reports read the same figures after the drop;
4. archived and verified: the latest verification of the period against the database in
   `archives` (`gpubill archive verify`), its manifest unchanged (sha256), every file present
   with its sha256, and each table's rows of the period, count and content checksum, still
   those of the manifest;
5. marked: a `retention_runs` row. From now on reports read the period from rollups only,
   and rows written to it later are "frozen" (reported by the rollup and the audit, not
   billed) instead of mixing with half-dropped hours;
6. checked again: step 4's database totals, so that a write between 4 and 5 cannot be
   dropped unarchived; if they moved, the mark is removed and the period refused;
7. dropped: `rated_seconds` by its partition (the period); the raw tables by their UTC-month
   partitions that lie wholly inside the period, and by a synchronous DELETE of the period's
   seconds in the partitions it shares with its neighbours.

Re-running for a dropped period finishes a drop that was interrupted after step 5: a table
whose remaining rows of the period are still exactly the archived ones is dropped; an empty
one is done; one with other rows (written after the mark) is refused and left alone.

Errors:

    ReportsError
    └── RetentionRefused   a condition of steps 1–4 does not hold (the message says which)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from billing_rules.periods import previous_period
from reports.archive import (
    TABLES,
    ArchiveError,
    Checksum,
    check_files,
    database_checksum,
    database_differences,
    read_manifest,
    selection,
)
from reports.audit import rollup_differences
from reports.errors import ReportsError
from usage.rated import coverage, retained_periods, second_range
from usage.rollup import roll_up
from warehouse.cluster import mutation_target

log = logging.getLogger("gpubill.retention")


class RetentionRefused(ReportsError):
    """A period's per-second rows may not be dropped yet: not closed, not invoiced, not rolled up,
    or not archived and verified; the message names what is missing."""


@dataclass
class RetentionResult:
    period: str
    archive: str = ""
    status: str = ""  # "dropped", "would drop" (dry run), "already dropped"
    rows: dict[str, int] = field(default_factory=dict)  # per table: rows dropped (or that would be)


def periods_due(db: Any, rules: Any, keep_periods: int, now: datetime | None = None) -> list[str]:
    """Periods with per-second rows older than the latest `keep_periods` (the current one included)."""
    now = now or datetime.now(UTC)
    cutoff = rules.period_of(int(now.timestamp()))
    for _ in range(keep_periods):
        cutoff = previous_period(cutoff)
    written = {row[0] for row in db.query("SELECT DISTINCT period FROM rated_writes")}
    return sorted(p for p in written - retained_periods(db) if p <= cutoff)


def apply_retention(db: Any, rules: Any, period: str, *, now: datetime | None = None,
                    dry_run: bool = False) -> RetentionResult:
    """Drop `period`'s per-second rows if every condition holds (module docstring); RetentionRefused if not."""
    lo, hi = rules.period_bounds(period)
    now = now or datetime.now(UTC)
    if period in retained_periods(db):
        return _finish(db, period, lo, hi, dry_run)
    # 1. closed
    closes = datetime.fromtimestamp(hi, UTC) + rules.grace_period
    if now < closes:
        raise RetentionRefused(f"{period} is not closed until {closes:%Y-%m-%dT%H:%MZ} (end + grace period); "
                               "its per-second rows are kept")
    # 2. invoiced
    if not db.query("SELECT count() FROM billing_runs FINAL WHERE period = {p:String}", {"p": period})[0][0]:
        raise RetentionRefused(f"{period} is not invoiced; run `gpubill invoice run --period {period}` first")
    # 3. rolled up (a dry run rolls up too: the scheduler's routine, it drops nothing), and the
    #    rollups equal the per-second rows
    roll_up(db, rules, period=period)
    cov = coverage(db, rules, period)
    if cov.live:
        raise RetentionRefused(f"{period} has {len(cov.live)} hours not rolled up since their last write; "
                               "run `gpubill rollup` once they have settled, then again")
    differences = rollup_differences(db, rules, cov)
    if differences:
        raise RetentionRefused(f"{period}: {differences[0].what} differs from its per-second rows "
                               f"({len(differences)} differences); see `gpubill audit --period {period}`")
    # 4. archived and verified, and still what the database holds
    directory, manifest_sha = _verified_archive(db, period)
    manifest = _unchanged_manifest(directory, manifest_sha)
    _check_database(db, rules, manifest)
    counts = {table: int(manifest["tables"][table]["rows"]) for table in TABLES}
    result = RetentionResult(period, str(directory), "would drop" if dry_run else "dropped", counts)
    if dry_run:
        return result
    # 5. mark, 6. check again, 7. drop
    db.insert("retention_runs", [[period, str(directory), manifest_sha, datetime.now(UTC)]],
              ["period", "archive", "manifest", "dropped_at"])
    try:
        _check_database(db, rules, manifest)
    except RetentionRefused:
        db.command(f"DELETE FROM {mutation_target('retention_runs', db.cluster)} WHERE period = {{p:String}}", {"p": period})
        raise
    for table in TABLES:
        _drop(db, table, period, lo, hi)
    log.info("retention dropped the per-second rows of %s (%s); archive %s", period,
             ", ".join(f"{t} {n}" for t, n in counts.items()), directory)
    return result


def _finish(db: Any, period: str, lo: int, hi: int, dry_run: bool) -> RetentionResult:
    """A period already marked: drop any table whose remaining rows are exactly the archived ones."""
    directory, manifest_sha = db.query(
        "SELECT argMax(archive, dropped_at), argMax(manifest, dropped_at) FROM retention_runs WHERE period = {p:String}",
        {"p": period})[0]
    result = RetentionResult(period, directory, "already dropped")
    remaining = [table for table in TABLES if _count(db, table, period, lo, hi)]
    if not remaining:  # the usual case: nothing to finish, the archive is not needed
        return result
    manifest = _unchanged_manifest(Path(directory), manifest_sha)
    for table in remaining:
        where, params = selection(table, period, lo, hi)
        expected = manifest["tables"][table]
        now = database_checksum(db, table, where, params, [tuple(c) for c in expected["columns"]])
        if now != Checksum(int(expected["rows"]), int(expected["checksum"])):
            raise RetentionRefused(f"{period}: {now.rows} rows of {table} were written after retention dropped the "
                                   "period (not billed, not archived); they are left for an operator to look at")
        result.rows[table] = now.rows
        if not dry_run:
            _drop(db, table, period, lo, hi)
    if result.rows:
        result.status = "would drop" if dry_run else "dropped"
    return result


def _count(db: Any, table: str, period: str, lo: int, hi: int) -> int:
    where, params = selection(table, period, lo, hi)
    return int(db.query(f"SELECT count() FROM {table} WHERE {where}", params)[0][0])


def _verified_archive(db: Any, period: str) -> tuple[Path, str]:
    rows = db.query(
        "SELECT dir, manifest FROM archives FINAL WHERE period = {p:String} AND against_db = 1 "
        "ORDER BY verified_at DESC LIMIT 1", {"p": period})
    if not rows:
        raise RetentionRefused(f"{period} has no verified archive; run `gpubill archive --period {period} --out DIR` "
                               "and `gpubill archive verify DIR` first")
    return Path(rows[0][0]), rows[0][1]


def _unchanged_manifest(directory: Path, manifest_sha: str) -> dict:
    """The archive's manifest, if it is the verified one and its files are all there, unchanged."""
    try:
        manifest, sha = read_manifest(directory)
        if sha != manifest_sha:
            raise RetentionRefused(f"{directory}/manifest.json changed since it was verified; "
                                   "run `gpubill archive verify` again")
        check_files(directory, manifest)
    except ArchiveError as exc:
        raise RetentionRefused(f"the verified archive does not check any more: {exc}") from exc
    return manifest


def _check_database(db: Any, rules: Any, manifest: dict) -> None:
    differing = database_differences(db, rules, manifest)
    if differing:
        raise RetentionRefused(differing[0])


def _drop(db: Any, table: str, period: str, lo: int, hi: int) -> None:
    """Delete `table`'s rows of the period: whole partitions where they lie inside it, else a DELETE."""
    if table == "rated_seconds":  # PARTITION BY period; `period` is a checked YYYY-MM
        db.command(f"ALTER TABLE {mutation_target('rated_seconds', db.cluster)} DROP PARTITION '{period}'")
        return
    for month, (start, end) in _utc_months(lo, hi):  # PARTITION BY toYYYYMM(second), in UTC
        if lo <= start and end <= hi:
            db.command(f"ALTER TABLE {mutation_target(table, db.cluster)} DROP PARTITION {month}")
        else:
            db.command(f"ALTER TABLE {mutation_target(table, db.cluster)} DELETE IN PARTITION {month} "
                       f"WHERE {second_range(lo, hi)} "
                       "SETTINGS mutations_sync = 2")


def _utc_months(lo: int, hi: int) -> list[tuple[int, tuple[int, int]]]:
    """(YYYYMM, [start, end) in epoch s) of every UTC month that [lo, hi) touches."""
    months = []
    day = datetime.fromtimestamp(lo, UTC)
    year, month = day.year, day.month
    while True:
        start = int(datetime(year, month, 1, tzinfo=UTC).timestamp())
        if start >= hi:
            return months
        year_after, month_after = (year + 1, 1) if month == 12 else (year, month + 1)
        end = int(datetime(year_after, month_after, 1, tzinfo=UTC).timestamp())
        months.append((year * 100 + month, (start, end)))
        year, month = year_after, month_after
