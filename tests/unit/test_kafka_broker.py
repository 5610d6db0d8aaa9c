"""The local broker's pure parts and its refusals, without starting Java."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest

from gpubill.devenv.kafka_broker import (
    BrokerStartFailed,
    JavaMissing,
    LocalBroker,
    MavenMissing,
)
from gpubill.devenv.kafka_config import new_cluster_id, render_server_properties
from gpubill.devenv.kafka_install import jars_fingerprint, parse_java_major, render_pom
from gpubill.devenv.kafka_probe import split_bootstrap
from gpubill.errors import USER_ERRORS
from streams.errors import KafkaUnreachable


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6)', 17),
        ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', 8),
        ('openjdk version "11.0.22" 2024-01-16', 11),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "25-ea" 2025-09-16', 25),
        ("openjdk 21.0.2 2024-01-16\nOpenJDK Runtime Environment", 21),
        ("bash: java: command not found", None),
        ("", None),
    ],
)
def test_java_major_version_is_read_from_both_numbering_schemes(output, major):
    assert parse_java_major(output) == major


def test_server_properties_name_both_listeners_and_replication_one(tmp_path):
    text = render_server_properties(log_dir=tmp_path / "data", port=19092, controller_port=19093)
    props = dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@localhost:19093"
    assert props["listeners"] == "PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://localhost:19092"
    assert props["log.dirs"] == str(tmp_path / "data")
    assert props["num.partitions"] == "8"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"


def test_pom_asks_for_the_broker_and_its_logging_binding():
    pom = render_pom()
    assert "<artifactId>kafka_2.13</artifactId>" in pom and "<version>4.1.1</version>" in pom
    assert "log4j-slf4j-impl" in pom


def test_cluster_id_is_22_url_safe_characters():
    ids = {new_cluster_id() for _ in range(20)}
    assert len(ids) == 20
    assert all(len(i) == 22 and "=" not in i and "+" not in i and "/" not in i for i in ids)


def test_bootstrap_lists_are_split_into_hosts_and_ports():
    assert split_bootstrap("localhost:9092") == [("localhost", 9092)]
    assert split_bootstrap("a:1, b:2,") == [("a", 1), ("b", 2)]
    assert split_bootstrap("PLAINTEXT://kafka:29092") == [("kafka", 29092)]
    assert split_bootstrap("kafka") == [("kafka", 9092)]


@pytest.mark.parametrize(
    ("kwargs", "bootstrap", "port", "controller_port"),
    [
        ({}, "localhost:9092", 9092, 9093),
        ({"bootstrap": "localhost:29092"}, "localhost:29092", 29092, 29093),
        ({"port": 19092, "controller_port": 19093}, "localhost:19092", 19092, 19093),
        ({"bootstrap": None, "port": 19092}, "localhost:19092", 19092, 19093),
    ],
)
def test_ports_follow_the_bootstrap_unless_given(tmp_path, kwargs, bootstrap, port, controller_port):
    broker = LocalBroker(tmp_path, **kwargs)
    assert (broker.bootstrap, broker.port, broker.controller_port) == (bootstrap, port, controller_port)


def test_jar_cache_can_be_moved_by_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBILL_KAFKA_CACHE", str(tmp_path / "cache"))
    assert LocalBroker(tmp_path).libs_dir == tmp_path / "cache" / "libs"


def test_errors_are_one_line_errors_the_cli_reports():
    for error in (JavaMissing(), JavaMissing('java version "1.8.0"'), MavenMissing(), MavenMissing("exit 1"),
                  KafkaUnreachable("localhost:9092"), BrokerStartFailed("x")):  # fmt: skip
        assert isinstance(error, USER_ERRORS)
        assert "\n" not in str(error)
    assert "Java 17 or newer" in str(JavaMissing()) and "GPUBILL_KAFKA" in str(JavaMissing())


def test_missing_java_is_reported(tmp_path):
    with pytest.raises(JavaMissing, match="Java 17 or newer"):
        LocalBroker(tmp_path, java="no-such-java-binary").check_java()


def test_old_java_is_reported(tmp_path):
    fake = tmp_path / "java"
    fake.write_text('#!/bin/sh\necho \'java version "1.8.0_392"\' >&2\n')
    fake.chmod(0o755)
    with pytest.raises(JavaMissing, match="1.8.0_392"):
        LocalBroker(tmp_path, java=str(fake)).check_java()


def test_missing_maven_is_reported_when_jars_are_not_cached(tmp_path):
    broker = LocalBroker(tmp_path / "home", cache_dir=tmp_path / "cache", mvn="no-such-mvn-binary")
    with pytest.raises(MavenMissing, match="Maven is needed"):
        broker.ensure_jars()


def test_cached_jars_are_used_without_maven(tmp_path):
    libs = tmp_path / "cache" / "libs"
    libs.mkdir(parents=True)
    (libs / ".complete").write_text(jars_fingerprint())
    broker = LocalBroker(tmp_path / "home", cache_dir=tmp_path / "cache", mvn="no-such-mvn-binary")
    assert broker.ensure_jars() == libs


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_is_up_is_false_and_quick_when_nothing_listens(tmp_path):
    broker = LocalBroker(tmp_path, port=free_port())
    began = time.monotonic()
    assert broker.is_up(timeout_s=1.0) is False
    assert time.monotonic() - began < 1.5


def test_is_up_is_false_within_its_timeout_for_a_silent_server(tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    try:
        broker = LocalBroker(tmp_path, bootstrap=f"127.0.0.1:{server.getsockname()[1]}")
        began = time.monotonic()
        assert broker.is_up(timeout_s=0.5) is False
        assert time.monotonic() - began < 1.0
    finally:
        server.close()


def test_up_refuses_a_port_held_by_something_else(tmp_path):
    libs = tmp_path / "cache" / "libs"
    libs.mkdir(parents=True)
    (libs / ".complete").write_text(jars_fingerprint())
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        port = server.getsockname()[1]
        broker = LocalBroker(tmp_path / "home", port=port, controller_port=free_port(), cache_dir=tmp_path / "cache")
        with pytest.raises(BrokerStartFailed, match=f"port {port} is taken"):
            broker.up(wait_s=5)
    finally:
        server.close()


def test_down_without_a_broker_is_a_no_op(tmp_path):
    broker = LocalBroker(tmp_path, port=free_port())
    assert broker.down() is False
    # a stale pid file naming some other live process: never signalled
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        broker.pid_file.write_text(f"{sleeper.pid}\n")
        assert broker.down(wait_s=1) is False
        assert sleeper.poll() is None
        assert not broker.pid_file.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    # a pid file naming a process that is gone
    broker.pid_file.write_text(f"{sleeper.pid}\n")
    assert broker.down() is False


def test_cluster_ids_never_start_with_a_dash(monkeypatch):
    # uuid bytes whose base64 starts with "-" (0xfb → "-w"), then ordinary ones
    import uuid as uuid_module

    from gpubill.devenv import kafka_config as kafka_local

    draws = iter([uuid_module.UUID(bytes=b"\xfb" + b"\x00" * 15), uuid_module.UUID(bytes=b"\x01" * 16)])
    monkeypatch.setattr(kafka_local.uuid, "uuid4", lambda: next(draws))
    cluster_id = kafka_local.new_cluster_id()
    assert not cluster_id.startswith("-") and len(cluster_id) == 22
