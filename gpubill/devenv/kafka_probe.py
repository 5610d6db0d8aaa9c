"""Is a Kafka broker answering? One Metadata request over a raw socket, nothing else.

`LocalBroker.is_up` asks this before starting a broker and while waiting for one. It
sends a Metadata request that names no topics and reads just enough of the answer to see
that a broker listed itself. Pure socket code, no Kafka client; every call is bounded by
its `timeout_s`.

A SASL listener answers nothing but ApiVersions and the SASL handshake before a client has
logged in (it closes the connection on a Metadata request), so `probe_kafka(...,
before_auth=True)` asks ApiVersions instead: the probe never needs, and never sends,
credentials.
"""

from __future__ import annotations

import socket
import struct
import time


def split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """`host:port,host2:port2` as (host, port) pairs; a missing port means 9092."""
    servers = []
    for item in bootstrap.split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "9092"
        servers.append((host.strip("[]") or "localhost", int(port)))
    return servers


def _metadata_request(correlation_id: int) -> bytes:
    """A Metadata v4 request asking for no topics: the answer lists the brokers only.

    v4 is old enough for every broker since Kafka 1.0 and new enough for Kafka 4, which
    dropped the pre-v4 versions (KIP-896).
    """
    client_id = b"gpubill-probe"
    header = struct.pack(">hhih", 3, 4, correlation_id, len(client_id)) + client_id
    body = struct.pack(">i?", 0, False)  # topics: empty array; allow_auto_topic_creation: false
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.extend(chunk)
    return bytes(chunks)


def _api_versions_request(correlation_id: int) -> bytes:
    """An ApiVersions v0 request (api key 18): allowed before SASL authentication."""
    client_id = b"gpubill-probe"
    payload = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(payload)) + payload


def probe_kafka(host: str, port: int, timeout_s: float, *, before_auth: bool = False) -> bool:
    """True when a Kafka broker at host:port answers a metadata request naming ≥ 1 broker.

    `before_auth`: for a SASL listener, true when it answers ApiVersions without error.
    """
    deadline = time.monotonic() + timeout_s
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout_s)) as sock:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            if before_auth:
                sock.sendall(_api_versions_request(correlation_id=7))
            else:
                sock.sendall(_metadata_request(correlation_id=7))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            if size < 12 or size > 10_000_000:
                return False
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            response = _recv_exactly(sock, min(size, 4096))
    except (OSError, ConnectionError, struct.error):
        return False
    if before_auth:
        # correlation_id int32, error_code int16, api_keys array int32 length
        correlation_id, error_code, api_count = struct.unpack(">ihi", response[:10])
        return correlation_id == 7 and error_code == 0 and api_count > 0
    # correlation_id int32, throttle_time_ms int32, brokers array int32 length
    correlation_id, _throttle, broker_count = struct.unpack(">iii", response[:12])
    return correlation_id == 7 and broker_count > 0
