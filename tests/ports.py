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
PORT_RANGE = range(29092, 29900)  # ports side by side: a broker's and its controller's, a bench's gateway
SINGLE_RANGE = range(29900, 32700)  # one port each: gateways, the API, metrics
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
    """A port nothing listens on, reserved for this process.

    Taken below Linux's ephemeral range (32768 up), where the kernel picks the source ports of
    outgoing connections: a port in that range, free when probed, can become some client
    socket's source port before the test's server binds it."""
    for port in SINGLE_RANGE:
        if _reserve(port) and _free(port):
            return port
    raise RuntimeError("no free port could be reserved for a test server")


def free_port_run(count: int) -> int:
    """`port` such that `port` … `port + count - 1` are free and reserved for this process.

    Everything a test's servers bind must be reserved: a bench with a gateway serves it on
    the broker's port + 2, so its test asks for three (two broker ports reserved and a third
    merely used once let another test process's broker take it and fail to start)."""
    for start in range(PORT_RANGE.start, PORT_RANGE.stop - count + 1, count):
        run = range(start, start + count)
        if all(_reserve(port) for port in run) and all(_free(port) for port in run):
            return start
        # some port of the run is reserved by another process or taken by something outside the
        # tests: keep what this process reserved (released at its exit) and try the next run
    raise RuntimeError(f"no {count} free ports side by side for a test's servers")


def free_port_pair() -> int:
    """`port` such that `port` and `port + 1` are free and reserved for this process: a
    broker's port and its controller port."""
    return free_port_run(2)
