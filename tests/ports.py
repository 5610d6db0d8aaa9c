"""Ports for the tests' servers (brokers, gateways, the API), reserved across processes.

Tests run in several pytest processes at once (pytest-xdist) and start servers that must
bind a fixed port after it was chosen (a Kafka broker is told its ports in its properties
file). A port that is merely free when probed can be taken by another process before the
server binds it, so each port handed out here is also *reserved*: an exclusive lock on
`<tmp>/gpubill-test-ports/<port>.lock`, held until the process that took it exits. Every
test process asks here, so two never get the same port, whoever binds first.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
from pathlib import Path

LOCKS = Path(tempfile.gettempdir()) / "gpubill-test-ports"
PAIR_RANGE = range(29092, 29900, 2)  # brokers: port and controller port, side by side
_held: list[int] = []  # the lock files' descriptors: released when this process exits


def _reserve(port: int) -> bool:
    LOCKS.mkdir(exist_ok=True)
    fd = os.open(LOCKS / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _held.append(fd)
    return True


def _free(port: int) -> bool:
    """Nothing listens on `port` and it can be bound now."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as bind:
        bind.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            bind.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on, reserved for this process (the kernel picks it)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if _reserve(port):
            return port
    raise RuntimeError("no free port could be reserved for a test server")


def free_port_pair() -> int:
    """`port` such that `port` and `port + 1` are free and reserved for this process."""
    for port in PAIR_RANGE:
        if _reserve(port):
            if _reserve(port + 1):
                if _free(port) and _free(port + 1):
                    return port
                # taken by something outside the tests: keep the reservation, try the next pair
    raise RuntimeError("no free port pair for a test broker")
