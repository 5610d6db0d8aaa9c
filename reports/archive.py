"""Archives of a period's per-second rows: Parquet files and a manifest, written and verified.

Longer than 400 lines on purpose: the archive's format (its layout, manifest and both
checksums) is written and verified here side by side; split into a writer and a verifier,
the two could drift apart on what a file holds, and the verification would no longer be read
against the writing it checks.

An archive of period P holds exactly what retention (reports/retention.py) drops: the
rated seconds of P (`rated_seconds FINAL WHERE period = P`) and the raw readings of P's
seconds (`readings_usage`, `readings_power` FINAL, second in `rules.period_bounds(P)`).

    DIR/manifest.json                         written last: an archive without it is unfinished
    DIR/rated_seconds/20260301T00.parquet     one file per table and UTC hour that has rows,
    DIR/readings_usage/…  DIR/readings_power/…  zstd, rows in the table's sorting order

One hour of a table is one query, held in memory once (≈ 5 M rows for 1,280 cards), so a
month of any fleet is written in bounded memory.

Two checksums per file, both in the manifest:

- `sha256` of its bytes: the file is the one that was written;
- a content checksum: `count()` and `sum(cityHash64(tuple(<columns>)))` (mod 2^64) of its
  rows, computed by ClickHouse over the database's rows when archiving and over the file's
  rows read back (`file()` on the embedded engine, else loaded into a scratch table) when
  archiving and verifying. The sum does not depend on row order and adds up across files,
  so a table's total is compared with the database's rows in one query.

`verify_archive` checks every file (present, sha256, rows, content) and, while the period's
rows are still in the database, the manifest's totals against them; it then records the
verification in `archives` (migration 0009), which is what retention asks for.

Errors:

    ReportsError
    └── ArchiveError   the archive cannot be written here, or it does not verify (which file, why)
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from billing_rules.errors import BillingRulesError
from reports.errors import ReportsError
from reports.outputs import DEFAULT_FILE_MODE, make_dirs
from schemas.tables import PIPELINE_TABLES
from usage.rated import hour_range, retained_periods, second_range

FORMAT = "gpubill-archive/1"
MANIFEST = "manifest.json"
TABLES = ("rated_seconds", "readings_usage", "readings_power")  # what retention drops
_FILE = re.compile(r"(rated_seconds|readings_usage|readings_power)/(\d{8}T\d{2})\.parquet")
_COLUMN = re.compile(r"[a-z_][a-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_GLOB = frozenset("*?{}[]")  # file() reads these as globs: such paths are loaded instead
_MOD = 1 << 64


class ArchiveError(ReportsError):
    """An archive cannot be written (directory not empty, rows changing meanwhile) or does not
    verify (a file missing, changed or unlisted, counts or content differing, a bad manifest)."""


@dataclass(frozen=True)
class Checksum:
    """Rows and the sum of their cityHash64 (mod 2^64), as ClickHouse computes them."""

    rows: int
    sum: int

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(self.rows + other.rows, (self.sum + other.sum) % _MOD)


@dataclass(frozen=True)
class ArchiveSummary:
    period: str
    directory: Path
    files: int
    rows: dict[str, int]  # per table
    manifest_sha256: str


@dataclass(frozen=True)
class Verification:
    period: str
    directory: Path
    files: int
    rows: int
    manifest_sha256: str
    against_db: bool  # the totals were compared with the database's rows (not yet dropped)


# -- the period's rows, table by table ---------------------------------------------------------

def selection(table: str, period: str, lo: int, hi: int) -> tuple[str, dict]:
    """SQL condition and parameters: the rows of `table` that belong to `period` ([lo, hi) its seconds)."""
    if table == "rated_seconds":
        return "period = {period:String}", {"period": period}
    return second_range(lo, hi), {}


def _hash_sql(columns: list[tuple[str, str]]) -> str:
    names = ", ".join(f"`{name}`" for name, _ in columns)
    return f"count(), sum(cityHash64(tuple({names})))"


def database_checksum(db: Any, table: str, where: str, params: dict, columns: list[tuple[str, str]]) -> Checksum:
    """The content checksum of `table`'s rows (FINAL) matching `where`."""
    rows, total = db.query(f"SELECT {_hash_sql(columns)} FROM {table} FINAL WHERE {where}", params)[0]
    return Checksum(int(rows), int(total or 0))


def file_checksum(db: Any, path: Path, columns: list[tuple[str, str]], *, load: bool | None = None) -> Checksum:
    """The content checksum of a Parquet file's rows read back by ClickHouse as `columns`.

    The embedded engine reads the file itself (`file()`); a server cannot see our files, so
    their rows are loaded into a scratch table first (`load=True` forces that way, for tests)."""
    structure = ", ".join(f"`{name}` {kind}" for name, kind in columns)
    if load is None:
        load = not db.embedded or bool(_GLOB & set(str(path)))
    if not load:
        rows, total = db.query(f"SELECT {_hash_sql(columns)} FROM file({{path:String}}, Parquet, {{structure:String}})",
                               {"path": str(path), "structure": structure})[0]
        return Checksum(int(rows), int(total or 0))
    import pyarrow.parquet as pq

    scratch = f"archive_check_{uuid.uuid4().hex}"
    db.command(f"CREATE TABLE {scratch} ({structure}) ENGINE = Memory")
    try:
        names = [name for name, _ in columns]
        for batch in pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=names):
            values = [_plain_values(column) for column in batch.columns]
            db.insert(scratch, list(zip(*values)), names)
        rows, total = db.query(f"SELECT {_hash_sql(columns)} FROM {scratch}")[0]
        return Checksum(int(rows), int(total or 0))
    finally:
        db.command(f"DROP TABLE IF EXISTS {scratch}")


def _plain_values(column: Any) -> list:
    """A Parquet column as Python values the client inserts: ClickHouse writes enums as binary."""
    import pyarrow as pa

    values = column.to_pylist()
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return [None if v is None else v.decode() for v in values]
    return values


def _columns(table: str) -> list[tuple[str, str]]:
    return [(column.name, column.type) for column in PIPELINE_TABLES[table].columns]


# -- writing ------------------------------------------------------------------------------------

def write_archive(db: Any, rules: Any, period: str, out_dir: Path, *,
                  progress: Callable[[str], None] | None = None) -> ArchiveSummary:
    """Write the period's per-second rows to `out_dir` (absent or empty), then the manifest.

    Every file is read back by ClickHouse, and the files' content checksums, added up per
    table, are compared with the database's rows of the period: rows that change while
    archiving (late data) fail the archive instead of leaving one that differs. On failure
    the files written are removed again."""
    lo, hi = _bounds(rules, period)
    out_dir, created = _empty_directory(out_dir)
    written: list[Path] = []
    try:
        tables, files = {}, []
        for table in TABLES:
            columns = _columns(table)
            where, params = selection(table, period, lo, hi)
            # which hours have rows (FINAL leaves at least one row of every key: not needed here)
            hours = db.query(f"SELECT toUnixTimestamp(toStartOfHour(second)) AS h FROM {table} WHERE {where} "
                             "GROUP BY h ORDER BY h", params)
            total = Checksum(0, 0)
            for (hour,) in hours:
                entry = _write_hour(db, out_dir, table, columns, f"({where}) AND {hour_range(int(hour))}", params,
                                    int(hour), written)
                files.append(entry)
                total += Checksum(entry["rows"], int(entry["checksum"]))
                if progress:
                    progress(f"{entry['path']}: {entry['rows']} rows")
            # the files, read back, against the database's rows of the whole period in one pass
            in_db = database_checksum(db, table, where, params, columns)
            if in_db != total:
                raise ArchiveError(f"{table} rows of {period} changed while archiving (the files hold {total.rows}, "
                                   f"the database {in_db.rows}; late data?); archive again into an empty directory")
            tables[table] = {"columns": [list(c) for c in columns], "rows": total.rows, "checksum": str(total.sum)}
        manifest = {
            "format": FORMAT, "period": period, "billing_tz": str(rules.billing_tz), "seconds": [lo, hi],
            "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "checksum": "count() and sum(cityHash64(tuple(columns))) mod 2^64 of the rows, by ClickHouse",
            "tables": tables, "files": files,
        }
        data = (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode()
        _write_durably(out_dir / MANIFEST, data, written)
        _sync_directory(out_dir)
    except BaseException:
        _remove(written, out_dir, created)
        raise
    return ArchiveSummary(period, out_dir, len(files), {t: v["rows"] for t, v in tables.items()},
                          hashlib.sha256(data).hexdigest())


def _write_hour(db: Any, out_dir: Path, table: str, columns: list[tuple[str, str]], where: str, params: dict,
                hour: int, written: list[Path]) -> dict:
    names = ", ".join(f"`{name}`" for name, _ in columns)
    order = ", ".join(PIPELINE_TABLES[table].order_by)
    data = db.query_bytes(
        f"SELECT {names} FROM {table} FINAL WHERE {where} ORDER BY {order} "
        "SETTINGS output_format_parquet_compression_method = 'zstd'", params, "Parquet")
    relative = f"{table}/{datetime.fromtimestamp(hour, UTC):%Y%m%dT%H}.parquet"
    path = out_dir / relative
    make_dirs(path.parent)
    _write_durably(path, data, written)
    in_file = file_checksum(db, path, columns)  # the rows as they will be read back, compared by the caller
    return {"path": relative, "table": table, "hour": hour, "rows": in_file.rows,
            "sha256": hashlib.sha256(data).hexdigest(), "checksum": str(in_file.sum)}


def _empty_directory(out_dir: Path) -> tuple[Path, bool]:
    """`out_dir` resolved, made if absent; refused if it holds anything (whether it was made)."""
    out_dir = Path(out_dir).expanduser().resolve()
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ArchiveError(f"--out {out_dir}: not an empty directory; an archive is written into a new or empty one")
    created = not out_dir.exists()
    make_dirs(out_dir)
    return out_dir, created


def _write_durably(path: Path, data: bytes, written: list[Path]) -> None:
    """Write (a new file, mode 0640 whatever the umask) and fsync: after retention the
    archive is the only copy of these rows."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, DEFAULT_FILE_MODE)
    os.fchmod(fd, DEFAULT_FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        written.append(path)
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _sync_directory(directory: Path) -> None:
    for each in [directory, *(p for p in directory.iterdir() if p.is_dir())]:
        fd = os.open(each, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(written: list[Path], out_dir: Path, created: bool) -> None:
    """Undo a failed archive: the files it wrote, its table folders, the directory if it made it."""
    for path in written:
        path.unlink(missing_ok=True)
    for folder in [*(out_dir / table for table in TABLES), *([out_dir] if created else [])]:
        try:
            folder.rmdir()
        except OSError:
            pass


# -- reading and verifying ------------------------------------------------------------------------

def read_manifest(directory: Path) -> tuple[dict, str]:
    """The archive's manifest, checked for shape (no path may leave the directory), and its sha256."""
    path = Path(directory) / MANIFEST
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArchiveError(f"{directory}: no {MANIFEST}; not an archive, or its writing did not finish") from None
    except OSError as exc:
        raise ArchiveError(f"{path}: {exc.strerror}") from exc
    try:
        manifest = json.loads(data)
        _check_manifest(manifest)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        why = f"no {exc}" if isinstance(exc, KeyError) else (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ArchiveError(f"{path}: not a valid manifest ({why})") from exc
    return manifest, hashlib.sha256(data).hexdigest()


def _check_manifest(manifest: dict) -> None:
    if manifest["format"] != FORMAT:
        raise ValueError(f"format {manifest['format']!r}, expected {FORMAT}")
    from billing_rules.periods import parse_period

    try:
        parse_period(manifest["period"])
    except BillingRulesError as exc:
        raise ValueError(str(exc)) from exc
    if sorted(manifest["tables"]) != sorted(TABLES):
        raise ValueError(f"tables {sorted(manifest['tables'])}, expected {sorted(TABLES)}")
    for table in manifest["tables"].values():
        for name, kind in table["columns"]:
            if not (isinstance(name, str) and _COLUMN.fullmatch(name) and isinstance(kind, str) and _plain_type(kind)):
                raise ValueError(f"column {name!r} {kind!r}: not a plain name and type")
        int(table["rows"])
        _u64(table["checksum"])
    if [type(x) for x in manifest["seconds"]] != [int, int]:
        raise ValueError("seconds: not [first, end) epoch seconds")
    seen = set()
    for entry in manifest["files"]:
        match = _FILE.fullmatch(entry["path"]) if isinstance(entry["path"], str) else None
        if match is None or match[1] != entry["table"] or entry["path"] in seen:
            raise ValueError(f"file path {entry['path']!r}: not TABLE/YYYYMMDDTHH.parquet inside the archive, or twice")
        if not _SHA256.fullmatch(str(entry["sha256"])) or int(entry["rows"]) < 0:
            raise ValueError(f"{entry['path']}: bad sha256 or rows")
        _u64(entry["checksum"])
        seen.add(entry["path"])


def _plain_type(kind: str) -> bool:
    """A ClickHouse type and nothing else (the manifest's types go into SQL): literals, names,
    numbers, brackets, commas inside brackets; no second word, so no DEFAULT or other clause."""
    bare = re.sub(r"'[^'\\]*'", "''", kind)
    if not re.fullmatch(r"[A-Za-z0-9_(),'= ]+", bare) or re.search(r"[\w)']\s+[\w(']", bare):
        return False
    depth = 0
    for char in bare:
        depth += (char == "(") - (char == ")")
        if depth < 0 or (char == "," and depth == 0):
            return False
    return depth == 0


def _u64(text: str) -> int:
    value = int(text)
    if not 0 <= value < _MOD:
        raise ValueError(f"checksum {text!r} out of range")
    return value


def verify_archive(db: Any, rules: Any, directory: Path, *,
                   progress: Callable[[str], None] | None = None) -> Verification:
    """Check the archive in `directory` and record the verification; ArchiveError names the first fault.

    1. the manifest is well-formed; no file path leaves the directory; no unlisted files;
    2. every file: present, its sha256, its rows (Parquet footer), its content checksum
       (rows read back by ClickHouse), and the files add up to each table's totals;
    3. while the period's rows are in the database (retention has not dropped them):
       each table's totals equal the database's rows of the period now.
    """
    directory = Path(directory).expanduser().resolve()
    manifest, manifest_sha = read_manifest(directory)
    period = manifest["period"]
    check_files(directory, manifest, db=db, progress=progress)
    against_db = period not in retained_periods(db)
    if against_db:
        differing = database_differences(db, rules, manifest)
        if differing:
            raise ArchiveError(differing[0])
    rows = sum(int(t["rows"]) for t in manifest["tables"].values())
    db.insert("archives", [[period, str(directory), manifest_sha, len(manifest["files"]), rows, int(against_db),
                            datetime.now(UTC)]],
              ["period", "dir", "manifest", "files", "rows", "against_db", "verified_at"])
    return Verification(period, directory, len(manifest["files"]), rows, manifest_sha, against_db)


def check_files(directory: Path, manifest: dict, *, db: Any = None,
                progress: Callable[[str], None] | None = None) -> None:
    """Every file of the manifest present and unchanged (sha256, rows) and none unlisted; with `db`,
    each file's content read back by ClickHouse equals its checksum, and the files add up."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    listed = {entry["path"] for entry in manifest["files"]}
    for table in TABLES:
        for found in sorted((directory / table).glob("*")) if (directory / table).is_dir() else ():
            if f"{table}/{found.name}" not in listed:
                raise ArchiveError(f"{table}/{found.name}: in the archive but not in its manifest")
    totals = {table: Checksum(0, 0) for table in TABLES}
    for entry in manifest["files"]:
        relative, path = entry["path"], directory / entry["path"]
        if not path.resolve().is_relative_to(directory) or not path.is_file():
            raise ArchiveError(f"{relative}: missing from the archive (or a link out of it)")
        if _sha256_of(path) != entry["sha256"]:
            raise ArchiveError(f"{relative}: sha256 differs from the manifest (the file was changed or damaged)")
        try:
            rows = pq.ParquetFile(path).metadata.num_rows
        except (pa.ArrowException, OSError) as exc:
            raise ArchiveError(f"{relative}: not a readable Parquet file ({exc})") from exc
        if rows != int(entry["rows"]):
            raise ArchiveError(f"{relative}: {rows} rows, the manifest says {entry['rows']}")
        if db is not None:
            columns = [tuple(c) for c in manifest["tables"][entry["table"]]["columns"]]
            content = file_checksum(db, path, columns)
            if content != Checksum(int(entry["rows"]), int(entry["checksum"])):
                raise ArchiveError(f"{relative}: its rows read back differ from the manifest's content checksum")
        totals[entry["table"]] += Checksum(int(entry["rows"]), int(entry["checksum"]))
        if progress:
            progress(f"{relative}: ok")
    for table, total in totals.items():
        expected = manifest["tables"][table]
        if total != Checksum(int(expected["rows"]), int(expected["checksum"])):
            raise ArchiveError(f"{table}: the files hold {total.rows} rows, the manifest's total is {expected['rows']}")


def database_differences(db: Any, rules: Any, manifest: dict) -> list[str]:
    """One line per table whose rows of the period in the database differ from the manifest's totals."""
    period = manifest["period"]
    lo, hi = _bounds(rules, period)
    if [lo, hi] != list(manifest["seconds"]):
        return [f"the archive's seconds of {period} are not the billing time zone's ({rules.billing_tz})"]
    differing = []
    for table, expected in manifest["tables"].items():
        where, params = selection(table, period, lo, hi)
        columns = [tuple(c) for c in expected["columns"]]
        now = database_checksum(db, table, where, params, columns)
        if now != Checksum(int(expected["rows"]), int(expected["checksum"])):
            what = f"{now.rows} rows, the archive {expected['rows']}" if now.rows != int(expected["rows"]) else \
                "other content than the archive (re-rated rows?)"
            differing.append(f"the database's {table} rows of {period} differ from the archive: {what}; "
                             "archive the period again")
    return differing


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _bounds(rules: Any, period: str) -> tuple[int, int]:
    try:
        return rules.period_bounds(period)
    except BillingRulesError as exc:
        raise ArchiveError(str(exc)) from exc
