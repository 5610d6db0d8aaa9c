"""Issue 36, item 5: the record by which every command finds the database `gpubill up` serves
(warehouse/served.py), and `open_database` following it — believed only while the process it
names holds the database, only from a private file of this user, only for this database.

The "holder" here is a child process that takes the database's lock as `open_database` does
(flock on `<dir>.lock`, its pid written there) and sleeps: no chDB, no gateway, milliseconds."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warehouse import served
from warehouse.connection import open_database
from warehouse.errors import DatabaseBusy

HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0)
os.pwrite(fd, f"pid {os.getpid()} (gpubill up)".encode(), 0)
print("held", flush=True)
time.sleep(60)
"""


@pytest.fixture
def database(tmp_path) -> Path:
    path = tmp_path / "clickhouse"
    path.mkdir()
    return path


@pytest.fixture
def holder(database):
    """A process holding `database`'s lock, as `gpubill up` does."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(served.lock_path(database))], stdout=subprocess.PIPE,
                               text=True)
    assert process.stdout.readline().strip() == "held"
    yield process
    process.kill()
    process.wait()


def record(database: Path, pid: int, **fields) -> served.Served:
    return served.Served(**{"pid": pid, "command": "gpubill up", "database": str(database),
                            "dsn": "http://gpubill:pw@127.0.0.1:1/", "finance_dsn": "http://finance:fpw@127.0.0.1:1/",
                            **fields})


def test_a_published_record_is_private_and_believed_while_its_pid_holds_the_database(database, holder):
    path = served.publish(database, record(database, holder.pid))
    assert path == database.with_name("clickhouse.served")
    assert path.stat().st_mode & 0o777 == 0o600
    held, found, ignored = served.current(database)
    assert held == served.Holder(holder.pid, "gpubill up")
    assert (found, ignored) == (record(database, holder.pid), "")


def test_open_database_goes_through_the_server_the_record_names(database, holder, monkeypatch):
    # before: a command waited 5 s for the lock and failed ("is in use by pid …"), even with up serving
    served.publish(database, record(database, holder.pid))
    reached = []

    def client(dsn, **_):
        reached.append(dsn)
        raise ConnectionRefusedError  # stands for the gateway; whether it answers is not this test's matter

    monkeypatch.setattr("clickhouse_connect.get_client", client)
    started = time.monotonic()
    with pytest.raises(ConnectionRefusedError):
        open_database(f"chdb://{database}", wait_s=5)
    assert reached == ["http://gpubill:pw@127.0.0.1:1/"]
    assert time.monotonic() - started < 2  # at once, not after the lock's wait


def test_a_record_of_a_process_that_is_gone_is_stale(database, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    served.publish(database, record(database, int(dead.stdout)))
    assert served.current(database) == (None, None, "")  # nothing holds the lock: no one serves it
    with open_database(f"chdb://{database}", migrate=False, wait_s=0) as opened:  # the embedded database itself
        assert opened.embedded


def test_a_record_naming_another_pid_than_the_lock_holder_is_ignored(database, holder):
    # the pid of a process that died, now reused by another program: the lock holder tells
    served.publish(database, record(database, os.getpid()))
    held, found, ignored = served.current(database)
    assert held.pid == holder.pid and found is None
    assert "stale" in ignored
    with pytest.raises(DatabaseBusy, match=r"in use by pid \d+ \(gpubill up\).*record was ignored: .*stale"):
        open_database(f"chdb://{database}", wait_s=0.2)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_a_record_others_may_read_is_refused_and_the_refusal_says_why(database, holder, mode):
    path = served.publish(database, record(database, holder.pid))
    path.chmod(mode)
    _held, found, ignored = served.current(database)
    assert found is None and "readable by others" in ignored and "0600" in ignored
    with pytest.raises(DatabaseBusy, match="readable by others"):
        open_database(f"chdb://{database}", wait_s=0.2)


def test_a_link_or_a_record_of_another_database_is_ignored(database, holder, tmp_path):
    other = tmp_path / "elsewhere"
    other.mkdir()
    served.publish(other, record(other, holder.pid))  # a record of another database …
    served.record_path(database).symlink_to(served.record_path(other))  # … reached through a link
    assert served.current(database)[1] is None
    served.record_path(database).unlink()
    served.record_path(other).rename(served.record_path(database))  # the file itself, naming the other database
    _held, found, ignored = served.current(database)
    assert found is None and "names another database" in ignored


def test_a_malformed_record_is_ignored(database, holder):
    path = served.record_path(database)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b'{"pid": "many"')
    os.close(fd)
    _held, found, ignored = served.current(database)
    assert found is None and "not a record" in ignored


def test_a_holder_that_does_not_serve_is_named_and_waited_for(database, holder):
    served.publish(database, record(database, holder.pid, dsn="", finance_dsn=""))  # up with GPUBILL_GATEWAY_PORT=0
    _held, found, _ignored = served.current(database)
    assert found is not None and not found.serving
    with pytest.raises(DatabaseBusy, match="does not serve it"):
        open_database(f"chdb://{database}", wait_s=0.2)


def test_withdraw_removes_only_its_own_record(database):
    served.publish(database, record(database, 4242))
    served.withdraw(database, 4243)
    assert served.record_path(database).exists()
    served.withdraw(database, 4242)
    assert not served.record_path(database).exists()


def test_holder_takes_no_lock_it_could_keep(database):
    assert served.holder(database) is None  # no lock file yet
    served.lock_path(database).write_text("")
    assert served.holder(database) is None
    fd = os.open(served.lock_path(database), os.O_RDWR)  # and after asking, the lock is free for the next
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


@pytest.mark.parametrize("text, expected", [
    ("pid 12 (gpubill up --listen 127.0.0.1:8080)", served.Holder(12, "gpubill up --listen 127.0.0.1:8080")),
    ("pid 7", served.Holder(7, "")),
    ("", None), ("someone", None),
])
def test_the_lock_files_text(text, expected):
    assert served.parse_holder(text) == expected


def test_the_record_is_json_a_person_can_read(database):
    path = served.publish(database, record(database, 1, started="2026-12-06T00:49:54Z"))
    assert json.loads(path.read_text()) == {
        "pid": 1, "command": "gpubill up", "database": str(database), "dsn": "http://gpubill:pw@127.0.0.1:1/",
        "finance_dsn": "http://finance:fpw@127.0.0.1:1/", "started": "2026-12-06T00:49:54Z"}
