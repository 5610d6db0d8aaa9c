"""The real local broker: resolve jars, format, start, answer, create topics, stop, restart.

Uses ports 19092/19093 so that a broker already on 9092 is left alone.
"""

from __future__ import annotations

import shutil
import socket
import time

import pytest

from gpubill.devenv.kafka_broker import LocalBroker
from streams.errors import KafkaUnreachable
from streams.kafka.admin import ensure_topics

pytestmark = pytest.mark.e2e

PORT, CONTROLLER_PORT = 19092, 19093


def _taken(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def broker(tmp_path):
    if shutil.which("java") is None or (shutil.which("mvn") is None and not LocalBroker(tmp_path).libs_dir.exists()):
        pytest.skip("needs Java 17+ and Maven (or cached jars)")
    if _taken(PORT) or _taken(CONTROLLER_PORT):
        pytest.skip(f"ports {PORT}/{CONTROLLER_PORT} are in use")
    local = LocalBroker(tmp_path / "kafka", port=PORT, controller_port=CONTROLLER_PORT)
    yield local
    local.down(wait_s=20)


def test_broker_starts_serves_topics_stops_and_restarts_with_its_data(broker):
    assert broker.is_up(timeout_s=0.5) is False
    began = time.monotonic()
    assert broker.up(wait_s=120) is True
    started_s = time.monotonic() - began
    assert broker.is_up()
    assert broker.up() is False  # idempotent: already up
    assert broker.pid_file.is_file() and broker.format_marker.is_file()

    topics = {"gpu.usage.v1": 8, "gpu.power.v1": 8, "gpu.deadletter.v1": 1}
    ensure_topics(broker.bootstrap, topics)
    ensure_topics(broker.bootstrap, topics)  # existing topics are fine

    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = {t["name"]: len(t["partitions"]) for t in admin.describe_topics(list(topics))}
    finally:
        admin.close()
    assert described == topics

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    producer.send("gpu.deadletter.v1", key=b"k", value=b"hello").get(timeout=30)
    producer.close()

    began = time.monotonic()
    assert broker.down() is True
    stopped_s = time.monotonic() - began
    assert broker.is_up(timeout_s=0.5) is False
    assert broker.down() is False
    assert not broker.pid_file.exists()
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()

    # restart: no second format, the message survived
    marker = broker.format_marker.read_text()
    assert broker.up(wait_s=120) is True
    assert broker.format_marker.read_text() == marker
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    partition = TopicPartition("gpu.deadletter.v1", 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    values, deadline = [], time.monotonic() + 30
    while not values and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(record.value for record in records)
    consumer.close()
    assert values == [b"hello"]
    print(f"broker start {started_s:.1f} s, stop {stopped_s:.1f} s")


def test_ensure_topics_without_a_broker_says_so(tmp_path):
    began = time.monotonic()
    with pytest.raises(KafkaUnreachable, match="no Kafka broker answers at localhost:19099"):
        ensure_topics("localhost:19099", {"t": 1}, timeout_s=2)
    assert time.monotonic() - began < 10
