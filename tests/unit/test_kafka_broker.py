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
from gpubill.devenv.kafka_config import (
    SaslSetup,
    ScramUser,
    new_cluster_id,
    render_server_properties,
    scram_arguments,
)
from gpubill.devenv.kafka_install import jars_fingerprint, parse_java_major, render_pom
from gpubill.devenv.kafka_probe import split_bootstrap
from gpubill.errors import USER_ERRORS
from streams.errors import KafkaUnreachable
from streams.kafka.settings import client_options, kafka_security, security_problem
from streams.faust_app import broker_credentials as faust_credentials
from tests.ports import free_port  # reserved: never another test process's (pytest-xdist)


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


# --------------------------------------------------------------------------- SASL/SCRAM


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def _sasl() -> SaslSetup:
    return SaslSetup(broker=ScramUser("broker", "broker-pw-123456"), controller_password="ctl-pw-1234567",
                     users=(ScramUser("worker", "worker-pw-12345", "SCRAM-SHA-256"),), super_users=("admin",))


def test_the_default_broker_stays_plaintext_without_an_authorizer(tmp_path):
    props = _props(render_server_properties(log_dir=tmp_path, port=19092, controller_port=19093))
    assert props["listener.security.protocol.map"] == "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    assert not [key for key in props if "sasl" in key or "authorizer" in key or key == "super.users"]


def test_a_sasl_broker_authenticates_every_listener_and_enforces_acls(tmp_path):
    props = _props(render_server_properties(log_dir=tmp_path, port=19092, controller_port=19093, sasl=_sasl()))
    assert props["listeners"] == "SASL_PLAINTEXT://localhost:19092,CONTROLLER://localhost:19093"
    assert props["advertised.listeners"] == "SASL_PLAINTEXT://localhost:19092"
    assert "PLAINTEXT:PLAINTEXT" not in props["listener.security.protocol.map"]
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:broker;User:controller;User:admin"  # not the worker
    jaas = props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    assert 'username="broker" password="broker-pw-123456";' in jaas
    assert props["listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"].endswith("required;")
    assert 'user_controller="ctl-pw-1234567"' in props["listener.name.controller.plain.sasl.jaas.config"]
    assert scram_arguments(_sasl()) == [
        "--add-scram", "SCRAM-SHA-512=[name=broker,password=broker-pw-123456]",
        "--add-scram", "SCRAM-SHA-256=[name=worker,password=worker-pw-12345]",
    ]


@pytest.mark.parametrize("password", ['has"quote-in-it', "comma,in-it-123", "bracket]-in-it1", "space in it 123",
                                      "new\nline-in-it", "short", "eq=sign-in-it-1", "back\\slash-in-it"])
def test_a_password_that_would_break_out_of_jaas_or_format_arguments_is_refused(password):
    with pytest.raises(ValueError, match="password"):
        ScramUser("worker", password)
    assert password not in repr(ScramUser("worker", "fine-password-1"))


@pytest.mark.parametrize("name", ["", "a b", "x,y", "x=y", "é", "a" * 65])
def test_a_scram_user_name_outside_the_safe_characters_is_refused(name):
    with pytest.raises(ValueError):
        ScramUser(name, "fine-password-1")


def test_a_sasl_setup_hides_its_secrets_and_refuses_clashing_names():
    assert "pw" not in repr(_sasl())
    with pytest.raises(ValueError, match="distinct"):
        SaslSetup(broker=ScramUser("worker", "broker-pw-123456"), controller_password="ctl-pw-1234567",
                  users=(ScramUser("worker", "worker-pw-12345"),))


@pytest.mark.parametrize(
    ("protocol", "mechanism", "username", "password", "cafile", "problem"),
    [
        ("PLAINTEXT", "SCRAM-SHA-512", None, None, None, None),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "w", "pw", None, None),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "w", None, None, "needs GPUBILL_KAFKA_USERNAME and GPUBILL_KAFKA_PASSWORD"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", None, "pw", None, "needs GPUBILL_KAFKA_USERNAME"),
        ("PLAINTEXT", "SCRAM-SHA-512", "w", "pw", None, "are set but GPUBILL_KAFKA_SECURITY_PROTOCOL is PLAINTEXT"),
        ("SASL_PLAINTEXT", "PLAIN", "w", "pw", None, "sends the password in clear"),
        ("SASL_SSL", "PLAIN", "w", "pw", None, None),
        ("SASL_PLAINTEXT", "GSSAPI", "w", "pw", None, "GPUBILL_KAFKA_SASL_MECHANISM must be one of"),
        ("HTTP", "SCRAM-SHA-512", None, None, None, "GPUBILL_KAFKA_SECURITY_PROTOCOL must be one of"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "w", "pw", "/etc/hostname", "no TLS"),
        ("SASL_SSL", "SCRAM-SHA-512", "w", "pw", "/nonexistent/ca.pem", "not a readable file"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "a,b=c", "pw", None, "may not contain"),
    ],
)
def test_kafka_security_combinations(protocol, mechanism, username, password, cafile, problem):
    found = security_problem(protocol, mechanism, username, password, cafile)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found
        if password:
            assert password not in found.replace("GPUBILL_KAFKA_PASSWORD", "")


def test_client_options_carry_the_credentials_to_both_libraries():
    from types import SimpleNamespace

    plain = SimpleNamespace(kafka="k:1", group="g", partitions=1)  # no security attributes at all
    assert client_options(plain, client="kafka-python") == {"security_protocol": "PLAINTEXT"}
    assert faust_credentials(plain) is None
    secret = "s3cret-" + "x" * 10
    sasl = SimpleNamespace(kafka="k:1", group="g", partitions=1, kafka_security_protocol="SASL_SSL",
                           kafka_sasl_mechanism="SCRAM-SHA-256", kafka_username="worker", kafka_password=secret,
                           kafka_cafile=None)
    expected = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "worker",
                "sasl_plain_password": secret}
    assert client_options(sasl, client="kafka-python") == expected  # system CAs: no ssl_cafile
    aio = client_options(sasl, client="aiokafka")
    assert {k: v for k, v in aio.items() if k != "ssl_context"} == expected
    assert aio["ssl_context"].check_hostname is True
    credentials = faust_credentials(sasl)
    assert (credentials.username, credentials.password, credentials.mechanism.value) == ("worker", secret, "SCRAM-SHA-256")
    assert credentials.protocol.value == "SASL_SSL"
    assert secret not in repr(credentials) and secret not in repr(kafka_security(sasl))
    assert secret not in kafka_security(sasl).describe()


def test_settings_refuse_sasl_without_a_password_in_one_line(monkeypatch):
    from gpubill.config import load_settings
    from gpubill.errors import ConfigError

    monkeypatch.setenv("GPUBILL_SETTINGS", "/nonexistent/gpubill.toml")
    monkeypatch.setenv("GPUBILL_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("GPUBILL_KAFKA_USERNAME", "worker")
    with pytest.raises(ConfigError, match="needs GPUBILL_KAFKA_USERNAME and GPUBILL_KAFKA_PASSWORD") as refused:
        load_settings()
    assert "\n" not in str(refused.value)
    monkeypatch.setenv("GPUBILL_KAFKA_PASSWORD", "a-real-secret-123")
    settings = load_settings()
    assert "a-real-secret-123" not in repr(settings) and "a-real-secret-123" not in str(settings.model_dump())


def test_a_home_formatted_plaintext_is_not_started_with_sasl(tmp_path):
    home = tmp_path / "kafka"
    home.mkdir()
    (home / ".formatted").write_text("eU1WfJb6Rc6QR1qrhbIfqg\n")
    broker = LocalBroker(home, port=19592, sasl=_sasl())
    with pytest.raises(BrokerStartFailed, match="formatted without SASL users"):
        broker._check_format_matches()
    LocalBroker(home, port=19592)._check_format_matches()  # the same way: fine


def test_kafka_up_sasl_without_sasl_settings_is_a_one_line_error(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "GPUBILL_HOME": str(tmp_path), "GPUBILL_KAFKA": "localhost:19594",
           "GPUBILL_SETTINGS": str(tmp_path / "none.toml")}
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "kafka", "up", "--sasl"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "GPUBILL_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" in done.stderr
    assert not (tmp_path / "kafka").exists()  # nothing started, nothing written
