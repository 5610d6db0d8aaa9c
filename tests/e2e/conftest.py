"""Real parts for end-to-end tests: a real Kafka broker, chDB in a tmp directory, and the
`gpubill` command line run as a child process, exactly as a user runs it.

One broker serves the whole session (per pytest-xdist worker): starting one is two JVM
starts (format, then the broker) and a first consumer group creates `__consumer_offsets`,
seconds each, paid once instead of per test. Each test gets it *empty* — every topic an
earlier test made is deleted before it starts — and a consumer group of its own
(`broker.group`, the test's GPUBILL_GROUP), so nothing a test produced, committed or left
half-joined (a worker killed with -9 stays a member until its session times out) reaches
the next one. Should an earlier test leave a process behind that re-creates its topics,
the broker is replaced by a new one (a warning says so). A test that stops, restarts or
reconfigures its broker is marked
`@pytest.mark.private_broker` and gets one of its own, as before."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpubill.devenv.kafka_broker import LocalBroker
from tests.ports import free_port_pair

E2E_DIR = Path(__file__).parent
FIXTURES = E2E_DIR / "fixtures"
TEST_RULES = E2E_DIR / "rules"


_groups = itertools.count(1)


class TopicsLeft(Exception):
    """An earlier test's topics keep coming back: some process of it still talks to the broker."""


def empty_topics(bootstrap: str, wait_s: float = 30.0) -> None:
    """Delete every topic but the broker's own (`__consumer_offsets`, ...) and wait until the
    broker no longer lists them; TopicsLeft when they are still listed after `wait_s`."""
    from kafka import KafkaAdminClient
    from kafka.errors import UnknownTopicOrPartitionError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="e2e-cleanup")
    try:
        deadline = time.monotonic() + wait_s
        while True:
            left = [name for name in admin.list_topics() if not name.startswith("__")]
            if not left:
                return
            if time.monotonic() > deadline:
                raise TopicsLeft(f"topics of an earlier test still listed after {wait_s:.0f} s: {left}")
            try:
                admin.delete_topics(left, timeout_ms=30_000)
            except UnknownTopicOrPartitionError:
                pass  # deleted meanwhile
            time.sleep(0.2)
    finally:
        admin.close()


class SessionBrokers:
    """The test process's broker, replaced by a new one (new ports, new data) when an earlier
    test left a process behind that keeps re-creating its topics (a consumer's metadata
    request creates a missing topic): that process then talks to a broker that is gone."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self.current = self._start()

    def _start(self) -> LocalBroker:
        port = free_port_pair()
        local = LocalBroker(self.factory.mktemp("kafka"), bootstrap=f"localhost:{port}", port=port,
                            controller_port=port + 1)
        local.up(wait_s=120)
        return local

    def emptied(self) -> LocalBroker:
        try:
            empty_topics(self.current.bootstrap)
        except TopicsLeft as exc:
            warnings.warn(f"{exc}; starting a new broker for the tests that follow")
            self.current.down(wait_s=20)
            self.current = self._start()
        return self.current


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory):
    brokers = SessionBrokers(tmp_path_factory)
    yield brokers
    brokers.current.down(wait_s=20)


@pytest.fixture
def broker(request, tmp_path):
    """A broker for this test with `.group`, the consumer group its workers use: the session's
    broker emptied, or (marked private_broker) one of the test's own."""
    if request.node.get_closest_marker("private_broker"):
        port = free_port_pair()
        local = LocalBroker(tmp_path / "kafka", bootstrap=f"localhost:{port}", port=port, controller_port=port + 1)
        local.up(wait_s=120)
        local.group = "e2e-rating"
        yield local
        local.down(wait_s=20)
        return
    local = request.getfixturevalue("session_broker").emptied()
    local.group = f"e2e-rating-{next(_groups)}"
    yield local


@dataclass
class Gpubill:
    """Runs `gpubill ...` with this test's broker, database and rules."""

    env: dict[str, str]
    cwd: Path

    def run(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "gpubill.cli", *args],
            env=self.env, cwd=self.cwd, capture_output=True, text=True, timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(f"gpubill {' '.join(args)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
        return done

    def json(self, *args: str):
        return json.loads(self.run(*args).stdout)

    def many(self, *commands: tuple[str, ...], timeout: float = 300) -> list[subprocess.CompletedProcess]:
        """Run `gpubill <command>` for each of `commands` (reads: nothing they do may depend on one another's
        process) one after another in ONE child process, each with its own argv, stdout, stderr (as written:
        no newline translation) and exit code: the interpreter and the imports are paid once, not per command."""
        done = subprocess.run([sys.executable, "-c", _MANY], input=json.dumps(commands), env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"gpubill, {len(commands)} commands in one process, exited {done.returncode}\n"
                                 f"{done.stderr}")
        return [subprocess.CompletedProcess(["gpubill", *args], code, out, err)
                for args, (code, out, err) in zip(commands, json.loads(done.stdout), strict=True)]


# Gpubill.many's child: gpubill.cli.main once per command, its output captured as the process's would be.
_MANY = """
import contextlib, io, json, sys
from gpubill.cli import main
results = []
for argv in json.load(sys.stdin):
    sys.argv = ["gpubill", *argv]
    out, err = io.StringIO(newline=""), io.StringIO(newline="")
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    results.append((code, out.getvalue(), err.getvalue()))
sys.stdout.write(json.dumps(results))
"""


@pytest.fixture
def gpubill(tmp_path, broker) -> Gpubill:
    return Gpubill(env=e2e_env(tmp_path, broker.bootstrap, broker.group), cwd=tmp_path)


def e2e_env(tmp_path: Path, bootstrap: str, group: str) -> dict[str, str]:
    """The environment of a test's `gpubill` commands: its brokers, a database, rules, home and
    consumer group of its own, and nothing listening that another test could collide with."""
    return {
        **os.environ,
        "GPUBILL_KAFKA": bootstrap,
        "GPUBILL_CLICKHOUSE": f"chdb://{tmp_path / 'clickhouse'}",
        "GPUBILL_RULES": str(TEST_RULES),
        "GPUBILL_HOME": str(tmp_path / "var"),
        "GPUBILL_OUT": str(tmp_path / "out"),
        "GPUBILL_GROUP": group,
        "GPUBILL_PARTITIONS": "4",
        # hours are rolled up as soon as they are written (not a minute later), so that the
        # invoice runs and reports of every e2e test read rollups (usage/rated.py)
        "GPUBILL_ROLLUP_MARGIN_S": "0",
        # `gpubill up` serves the tenant API too: off unless a test turns it on (tests/e2e/test_api_up.py),
        # so that parallel runs and a developer's own server on 8080 do not collide
        "GPUBILL_HTTP_PORT": "0",
        # and it serves its database on GPUBILL_GATEWAY_PORT (8123): off unless a test turns it on
        # (tests/e2e/test_up.py), for the same reason
        "GPUBILL_GATEWAY_PORT": "0",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
