"""`gpubill clickhouse serve` as a child process, for gpubill's own tools and tests (the
pipeline benchmark's `--gateway`, the gateway and archive tests): started in its own session
with passwords its caller knows, and handed back with the DSNs that carry them."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpubill.devenv.gateway.auth import READER, WRITER, Credentials
from gpubill.errors import GpubillError


class GatewayStartError(GpubillError):
    """`spawn` could not start the gateway."""


@dataclass
class SpawnedGateway:
    """A gateway child process and the DSNs of its two users (passwords included)."""

    process: subprocess.Popen
    dsn: str  # user gpubill: what GPUBILL_CLICKHOUSE of a gpubill command is set to
    finance_dsn: str


def spawn(env: dict, port: int, *, cwd: Path | None = None, timeout_s: float = 60.0) -> SpawnedGateway:
    """`gpubill clickhouse serve` on 127.0.0.1:`port` as a child process in its own session,
    returned once it listens (its stderr is a text pipe). Passwords are env's
    GPUBILL_GATEWAY_PASSWORD / GPUBILL_GATEWAY_FINANCE_PASSWORD, or fresh ones given to the
    child the same way. Raises GatewayStartError when it exits or stays deaf."""
    passwords = {WRITER: env.get("GPUBILL_GATEWAY_PASSWORD") or secrets.token_urlsafe(24),
                 READER: env.get("GPUBILL_GATEWAY_FINANCE_PASSWORD") or secrets.token_urlsafe(24)}
    child_env = {**env, "GPUBILL_GATEWAY_PASSWORD": passwords[WRITER], "GPUBILL_GATEWAY_FINANCE_PASSWORD": passwords[READER]}
    process = subprocess.Popen(
        [sys.executable, "-m", "gpubill.cli", "clickhouse", "serve", "--listen", f"127.0.0.1:{port}"],
        env=child_env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise GatewayStartError(f"the ClickHouse gateway exited {process.returncode}: {process.stderr.read()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                credentials = Credentials(passwords)
                return SpawnedGateway(process, credentials.dsn("127.0.0.1", port), credentials.dsn("127.0.0.1", port, READER))
        time.sleep(0.1)
    process.kill()
    raise GatewayStartError(f"the ClickHouse gateway did not listen on port {port} within {timeout_s:.0f} s")
