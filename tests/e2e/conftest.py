"""Real parts for end-to-end tests: a fresh Kafka broker per test, chDB in a tmp directory,
and the `gpubill` command line run as a child process, exactly as a user runs it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpubill.devenv.kafka_broker import LocalBroker

E2E_DIR = Path(__file__).parent
FIXTURES = E2E_DIR / "fixtures"
TEST_RULES = E2E_DIR / "rules"


def _free_port_pair() -> int:
    for port in range(29092, 29400, 2):
        with socket.socket() as a, socket.socket() as b:
            if a.connect_ex(("127.0.0.1", port)) != 0 and b.connect_ex(("127.0.0.1", port + 1)) != 0:
                return port
    raise RuntimeError("no free port pair for a test broker")


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


@pytest.fixture
def broker(tmp_path):
    port = _free_port_pair()
    local = LocalBroker(tmp_path / "kafka", bootstrap=f"localhost:{port}", port=port, controller_port=port + 1)
    local.up(wait_s=120)
    yield local
    local.down(wait_s=20)


@pytest.fixture
def gpubill(tmp_path, broker) -> Gpubill:
    env = {
        **os.environ,
        "GPUBILL_KAFKA": broker.bootstrap,
        "GPUBILL_CLICKHOUSE": f"chdb://{tmp_path / 'clickhouse'}",
        "GPUBILL_RULES": str(TEST_RULES),
        "GPUBILL_HOME": str(tmp_path / "var"),
        "GPUBILL_OUT": str(tmp_path / "out"),
        "GPUBILL_GROUP": "e2e-rating",
        "GPUBILL_PARTITIONS": "4",
        # hours are rolled up as soon as they are written (not a minute later), so that the
        # invoice runs and reports of every e2e test read rollups (usage/rated.py)
        "GPUBILL_ROLLUP_MARGIN_S": "0",
        # `gpubill up` serves the tenant API too: off unless a test turns it on (tests/e2e/test_api_up.py),
        # so that parallel runs and a developer's own server on 8080 do not collide
        "GPUBILL_HTTP_PORT": "0",
        "NO_COLOR": "1",
        "COLUMNS": "200",
    }
    return Gpubill(env=env, cwd=tmp_path)
