"""A real broker with SASL/SCRAM and ACLs: gpubill's clients log in, the ACLs hold.

The broker is the project's own (`LocalBroker` with a `SaslSetup`), its SCRAM users created
at format time; the ACLs are those of deploy/kafka/acls.txt, the file compose's
`kafka-init` service applies, created here through the Kafka admin protocol. gpubill's
clients are built from `Settings` exactly as the CLI builds them.
"""

from __future__ import annotations

import asyncio
import shutil
import time
import uuid
from pathlib import Path

import orjson
import pytest

from gpubill.config import Settings
from gpubill.devenv.kafka_broker import LocalBroker
from gpubill.devenv.kafka_config import SaslSetup, ScramUser
from schemas.topics import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE
from streams.errors import KafkaUnreachable
from streams.kafka.admin import ensure_pipeline_topics, group_offsets
from streams.kafka.books import KafkaBooks, ensure_books_topic, read_books
from streams.kafka.producers import make_producer
from streams.kafka.settings import client_options
from tests.ports import free_port_pair

pytestmark = pytest.mark.e2e

ACLS = Path(__file__).resolve().parents[2] / "deploy" / "kafka" / "acls.txt"
GROUP = "gpubill-rating"  # the group compose runs the workers in (acls.txt grants its prefix)
# One password per user, random per run: nothing here can pass by a default.
PASSWORDS = {name: f"{name}-{uuid.uuid4().hex}" for name in ("broker", "controller", "admin", "node-agent", "worker")}
MECHANISMS = {"admin": "SCRAM-SHA-512", "node-agent": "SCRAM-SHA-256", "worker": "SCRAM-SHA-512"}


def acl_lines() -> list[tuple[str, str, str, str, str]]:
    """(principal, operation, resource, pattern, name) of every line of acls.txt."""
    rows = []
    for line in ACLS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            principal, operation, resource, pattern, name = line.split()
            rows.append((principal, operation, resource, pattern, name))
    return rows


def settings_as(bootstrap: str, user: str, password: str | None = None) -> Settings:
    return Settings(kafka=bootstrap, group=GROUP, partitions=2, kafka_security_protocol="SASL_PLAINTEXT",
                    kafka_sasl_mechanism=MECHANISMS[user], kafka_username=user,
                    kafka_password=password or PASSWORDS[user])


def create_acls(bootstrap: str) -> int:
    """Create the ACLs of acls.txt as `admin`; returns how many were created."""
    from kafka import KafkaAdminClient
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
    )

    acls = [
        ACL(principal=f"User:{principal}", host="*", operation=ACLOperation[operation.upper()],
            permission_type=ACLPermissionType.ALLOW,
            resource_pattern=ResourcePattern(ResourceType[resource.upper().replace("-", "_")], name,
                                             ACLResourcePatternType[pattern.upper()]))
        for principal, operation, resource, pattern, name in acl_lines()
    ]
    every = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                      resource_pattern=ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_options(settings_as(bootstrap, "admin"),
                                                                          client="kafka-python"))
    try:
        result = admin.create_acls(acls)
        assert not result["failed"], result["failed"]
        # The controller has them; the broker's authorizer applies them from the metadata log a
        # little later (under load, after a client's first request: a refused InitProducerId).
        # DescribeAcls is answered from that authorizer: wait until it shows them all.
        deadline = time.monotonic() + 60
        while len(admin.describe_acls(every)[0]) < len(acls):
            assert time.monotonic() < deadline, "the broker never applied the ACLs"
            time.sleep(0.1)
    finally:
        admin.close()
    return len(result["succeeded"])


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    home = tmp_path_factory.mktemp("sasl") / "kafka"
    if shutil.which("java") is None or (shutil.which("mvn") is None and not LocalBroker(home).libs_dir.exists()):
        pytest.skip("needs Java 17+ and Maven (or cached jars)")
    port = free_port_pair()
    sasl = SaslSetup(
        broker=ScramUser("broker", PASSWORDS["broker"], "SCRAM-SHA-512"),
        controller_password=PASSWORDS["controller"],
        users=tuple(ScramUser(name, PASSWORDS[name], MECHANISMS[name]) for name in ("admin", "node-agent", "worker")),
        super_users=("admin",),
    )
    broker = LocalBroker(home, bootstrap=f"localhost:{port}", port=port, controller_port=port + 1, sasl=sasl)
    broker.up(wait_s=120)
    try:
        ensure_pipeline_topics(settings_as(broker.bootstrap, "admin"))
        ensure_books_topic(settings_as(broker.bootstrap, "admin"))  # compose: deploy/kafka/init.sh
        assert create_acls(broker.bootstrap) == len(acl_lines())
        yield broker
    finally:
        broker.down(wait_s=20)


def reading(n: int) -> dict:
    return {"kind": "usage", "gpu_uuid": f"GPU-{n}", "n": n}


def produce(settings: Settings, topic: str, values: list[bytes]) -> list:
    """Each value sent and acknowledged (raises otherwise); the records' metadata."""
    producer = make_producer(settings)
    try:
        return [producer.send(topic, key=b"k", value=value).get(timeout=20) for value in values]
    finally:
        producer.close(timeout=5)


async def consume(settings: Settings, topic: str, count: int, timeout_s: float = 30) -> list[bytes]:
    """What a worker's consumer (aiokafka, in its group, as the feeder builds it) reads."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka, group_id=settings.group,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                **client_options(settings, client="aiokafka"))
    await consumer.start()
    try:
        values, deadline = [], time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values += [record.value for record in records]
        await consumer.commit()
        return values
    finally:
        await consumer.stop()


def test_the_server_properties_with_secrets_are_private(sasl_broker):
    assert sasl_broker.properties_file.stat().st_mode & 0o777 == 0o600
    assert PASSWORDS["broker"] in sasl_broker.properties_file.read_text()


def test_a_node_agent_produces_readings_and_a_worker_reads_them(sasl_broker):
    agent, worker = settings_as(sasl_broker.bootstrap, "node-agent"), settings_as(sasl_broker.bootstrap, "worker")
    sent = [orjson.dumps(reading(n)) for n in range(5)]
    produce(agent, TOPIC_USAGE, sent)
    produce(agent, TOPIC_POWER, [orjson.dumps({"kind": "power", "gpu_uuid": "GPU-0"})])
    got = asyncio.run(consume(worker, TOPIC_USAGE, len(sent)))
    assert sorted(got) == sorted(sent)
    # the drain's offsets (kafka-python, in the worker's group) see the commit
    offsets = group_offsets(worker, [TOPIC_USAGE])
    assert sum(end for _, end in offsets.values()) == len(sent)
    assert sum(committed for committed, _ in offsets.values()) == len(sent)


def test_a_worker_may_produce_dead_letters(sasl_broker):
    worker = settings_as(sasl_broker.bootstrap, "worker")
    before = sum(end for _, end in group_offsets(worker, [TOPIC_DEADLETTER]).values())
    (written,) = produce(worker, TOPIC_DEADLETTER, [b"not json"])
    assert written.topic == TOPIC_DEADLETTER and written.offset >= 0
    # the dead letter is in the topic: its end offsets moved by exactly that one record
    assert sum(end for _, end in group_offsets(worker, [TOPIC_DEADLETTER]).values()) == before + 1


def test_a_node_agent_may_not_write_dead_letters_nor_read(sasl_broker):
    from kafka.errors import TopicAuthorizationFailedError

    agent = settings_as(sasl_broker.bootstrap, "node-agent")
    with pytest.raises(TopicAuthorizationFailedError):
        produce(agent, TOPIC_DEADLETTER, [b"forged"])
    with pytest.raises(Exception, match="(?i)authoriz"):
        asyncio.run(consume(agent, TOPIC_USAGE, 1, timeout_s=10))


def test_a_worker_may_not_write_readings(sasl_broker):
    from kafka.errors import TopicAuthorizationFailedError

    with pytest.raises(TopicAuthorizationFailedError):
        produce(settings_as(sasl_broker.bootstrap, "worker"), TOPIC_USAGE, [orjson.dumps(reading(99))])


@pytest.mark.parametrize("user", ["node-agent", "worker"])
def test_a_wrong_password_is_refused(sasl_broker, user):
    wrong = settings_as(sasl_broker.bootstrap, user, password="not-the-password-" + uuid.uuid4().hex)
    began = time.monotonic()
    with pytest.raises(KafkaUnreachable) as refused:
        produce(wrong, TOPIC_USAGE, [orjson.dumps(reading(1))])
    assert wrong.kafka_password.get_secret_value() not in str(refused.value)
    assert time.monotonic() - began < 60


def test_no_credentials_at_all_are_refused(sasl_broker):
    plaintext = Settings(kafka=sasl_broker.bootstrap, group=GROUP)
    with pytest.raises(KafkaUnreachable):
        produce(plaintext, TOPIC_USAGE, [b"{}"])


def _tenant_fact(tenant: str):
    from datetime import UTC, datetime

    from schemas.books import TenantFact, TenantRow

    at = datetime(2026, 3, 1, tzinfo=UTC)
    return TenantFact(kind="tenant_registered", tenant=TenantRow(tenant=tenant, display_name=tenant, status="active",
                                                                 created_at=at, updated_at=at))


def test_the_worker_user_writes_the_books_through_the_numbered_writer(sasl_broker, tmp_path):
    """acls.txt lets the worker (the scheduler's billing job) append through the transactional writer."""
    from billing.books import event_of
    from tests.chdb_template import migrated_dsn
    from warehouse.connection import open_database

    worker = settings_as(sasl_broker.bootstrap, "worker")
    with open_database(migrated_dsn(tmp_path / "ch")) as db:
        with KafkaBooks(worker, numbered=True).open(db) as books:
            books.numbering(db)  # the transactional writer: its id's ACLs
            books.record(db, [event_of(_tenant_fact("acme"))])
        assert db.query("SELECT tenant FROM tenants FINAL")[0][0] == "acme"
    assert [e.fact.tenant.tenant for _, e in read_books(worker)] == ["acme"]


def test_a_node_agent_may_not_write_the_books(sasl_broker, tmp_path):
    from tests.chdb_template import migrated_dsn
    from warehouse.connection import open_database

    with open_database(migrated_dsn(tmp_path / "ch")) as db:
        with pytest.raises(Exception, match="(?i)authoriz"):
            KafkaBooks(settings_as(sasl_broker.bootstrap, "node-agent"), numbered=True).open(db).numbering(db)
