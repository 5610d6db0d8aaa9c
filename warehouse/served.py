"""Who holds an embedded database, and where it is served: the record beside the database.

chDB allows one process per database directory (`warehouse.connection` locks
`<dir>.lock` and writes the holder's pid there). A process that holds the database and
serves it over ClickHouse's HTTP interface — `gpubill up`, `gpubill clickhouse serve` —
writes `<dir>.served` beside it (JSON, mode 0600: it carries the gateway's passwords):

    {"pid": 4242, "command": "gpubill up", "database": "/srv/gpubill/var/clickhouse",
     "dsn": "http://gpubill:…@127.0.0.1:8123/", "finance_dsn": "http://finance:…@127.0.0.1:8123/",
     "started": "2026-12-06T00:49:54Z"}

`dsn` and `finance_dsn` are empty when the holder does not serve the database (`gpubill up`
with GPUBILL_GATEWAY_PORT=0): the record then only says who holds it.

`open_database` follows a record: a command that finds the database locked by the very
process the record names goes through its `dsn` instead of waiting for the lock. A record
is believed only when all of these hold, else it is ignored (and `Ignored` says why):

    it is a regular file of this user, readable by no one else (0600), not a link;
    it is a record of this database (its `database` is the directory's real path);
    the database's lock is held, by the pid the record names (a record left behind by a
    process that died, or a pid reused by another program, is stale).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

SUFFIX = ".served"
_HOLDER = re.compile(r"^pid (\d+)(?: \((.*)\))?$", re.DOTALL)


@dataclass(frozen=True)
class Holder:
    """The process that holds an embedded database's lock, as its lock file names it."""

    pid: int
    command: str


@dataclass(frozen=True)
class Served:
    """A live record: the holder of the database and, when it serves it, its two DSNs."""

    pid: int
    command: str
    database: str
    dsn: str = ""
    finance_dsn: str = ""
    started: str = ""

    @property
    def serving(self) -> bool:
        return bool(self.dsn)


class Ignored(Exception):
    """A record that exists but is not believed; the message says why, in a few words."""


def record_path(database: Path) -> Path:
    """`<dir>.served` beside the database directory `database`."""
    return database.with_name(database.name + SUFFIX)


def lock_path(database: Path) -> Path:
    """`<dir>.lock`: the lock `warehouse.connection` holds while a process has the database open."""
    return database.with_name(database.name + ".lock")


def parse_holder(text: str) -> Holder | None:
    """'pid 4242 (gpubill up)' (what a lock file holds) → Holder; None for anything else."""
    match = _HOLDER.match(text.strip())
    return Holder(int(match.group(1)), (match.group(2) or "").strip()) if match else None


def holder(database: Path) -> Holder | None:
    """The process holding `database` now, or None when nobody does (its lock is free).

    Takes the lock for an instant when it is free (and lets it go at once), so it may be
    called by anyone, the holder included (a second descriptor is refused even in-process)."""
    lock = lock_path(database)
    try:
        fd = os.open(lock, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return parse_holder(os.pread(fd, 4096, 0).decode("utf-8", "replace")) or Holder(0, "")
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def read_record(database: Path, holder_pid: int) -> Served:
    """The record of `database` when it is believed (see the module docstring) for a lock held
    by `holder_pid`. Raises FileNotFoundError when there is none, Ignored when it is not believed."""
    path = record_path(database)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # FileNotFoundError, or ELOOP for a link
    with os.fdopen(fd, "r", encoding="utf-8") as source:
        info = os.fstat(source.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise Ignored(f"{path} is not a file of this user")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise Ignored(f"{path} is readable by others (mode {stat.filemode(info.st_mode)}, it must be 0600)")
        try:
            data = json.loads(source.read(65536))
            record = Served(pid=int(data["pid"]), command=str(data.get("command", "")), database=str(data["database"]),
                            dsn=str(data.get("dsn") or ""), finance_dsn=str(data.get("finance_dsn") or ""),
                            started=str(data.get("started", "")))
        except (ValueError, KeyError, TypeError):
            raise Ignored(f"{path} is not a record of a served database") from None
    if os.path.realpath(record.database) != os.path.realpath(database):
        raise Ignored(f"{path} names another database ({record.database})")
    if record.pid != holder_pid or record.pid <= 0 or not _alive(record.pid):
        raise Ignored(f"{path} is stale (pid {record.pid} does not hold the database)")
    return record


def current(database: Path) -> tuple[Holder | None, Served | None, str]:
    """(who holds `database` now, its believed record, why a record present was ignored — or '')."""
    held = holder(database)
    if held is None:
        return None, None, ""
    try:
        return held, read_record(database, held.pid), ""
    except FileNotFoundError:
        return held, None, ""
    except (Ignored, OSError) as exc:
        return held, None, str(exc)


def publish(database: Path, record: Served) -> Path:
    """Write `record` beside `database` (mode 0600, replacing any older one whole: a reader
    sees the old file or the new one, never half of one). Returns its path."""
    path = record_path(database)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(asdict(record), out, indent=2)
        out.write("\n")
    os.replace(temporary, path)
    return path


def withdraw(database: Path, pid: int) -> None:
    """Remove the record of `database` if it is `pid`'s (a newer holder's record stays)."""
    path = record_path(database)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if int(data.get("pid", -1)) == pid:
            path.unlink()
    except (OSError, ValueError, TypeError, AttributeError):
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive (and the uid check above already failed for it)
    return True
