"""Structural checks of compose.yaml, the Dockerfile and deploy/ (no Docker engine needed).

These read the files the way `docker compose` would (YAML, `${VAR:-default}`
interpolation with the defaults, `${VAR:?message}` with a made-up secret per required
variable, `$$` escapes) and check that the pieces agree with each other: the addresses
the gpubill processes use are the ones the Kafka and ClickHouse services actually listen
on, every dependency and build context exists — and that the deployment is safe by
default: every password is required (none has a default), each container gets only its
own secrets, every published port is on loopback, Kafka authenticates (SCRAM) and
authorises (ACLs), the application's ClickHouse user cannot manage access, and the
finance user is read-only and limited. Kafka is three KRaft nodes whose topics survive one of
them down (replication 3, min.insync.replicas 2, no unclean election); the profile `cluster`
is a ClickHouse cluster of 2 shards x 2 replicas on three keepers whose names agree everywhere.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml  # pyyaml, in the `test` extra

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
APP_SERVICES = ("worker", "scheduler", "api")
GPUBILL_SERVICES = ("migrate", "worker", "scheduler", "api", "migrate-cluster")  # containers of the gpubill image
BROKERS = ("kafka-1", "kafka-2", "kafka-3")
REPLICATION, MIN_INSYNC = 3, 2  # three brokers: one may be down and acks=all writes still succeed
CH_NODES = ("ch-s1r1", "ch-s1r2", "ch-s2r1", "ch-s2r2")  # profile `cluster`
KEEPERS = ("keeper-1", "keeper-2", "keeper-3")
CLUSTER = ROOT / "deploy" / "clickhouse" / "cluster"
DEPLOY = ROOT / "deploy"
TOPIC_PARTITIONS = 8  # gpu.usage.v1 / gpu.power.v1 / gpu.deadletter.v1

VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<default>[^}]*))?\}")


# ------------------------------------------------------------------------------ helpers


@pytest.fixture(scope="module")
def compose() -> dict:
    assert COMPOSE.is_file(), "compose.yaml is missing at the repository root"
    data = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def fake_secret(name: str) -> str:
    """The value a required variable gets here: distinct per variable, hex like a real one."""
    return "s" + hashlib.sha256(name.encode()).hexdigest()[:31]


def interpolate(value: object) -> str:
    """The value as compose resolves it with only the required variables set: `${X:-d}` → d,
    `${X:?msg}` → fake_secret(X), `$$` → `$`."""
    text = str(value)

    def sub(match: re.Match) -> str:
        if match.group("op") in (":?", "?"):
            return fake_secret(match.group("name"))
        assert match.group("op") in (":-", "-"), f"{match.group(0)}: give it a default or make it required"
        return match.group("default")

    return VAR.sub(sub, text.replace("$$", "\0")).replace("\0", "$")


def env(service: dict) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {str(k): interpolate(v) for k, v in raw.items()}


def raw_env(service: dict) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        raw = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    return {str(k): str(v) for k, v in raw.items()}


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def listeners(spec: str) -> dict[str, tuple[str, int]]:
    """'NAME://host:port,…' → {NAME: (host, port)}."""
    found = {}
    for item in spec.split(","):
        name, _, address = item.strip().partition("://")
        found[name] = host_port(address)
    return found


def command(service: dict) -> list[str]:
    cmd = service.get("command")
    return cmd.split() if isinstance(cmd, str) else list(cmd or [])


def depends_on(service: dict) -> dict[str, dict]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return deps


def service_names(services: dict, name: str) -> set[str]:
    """The DNS names a service answers to inside the compose network."""
    svc = services[name]
    return {name, *([svc["hostname"]] if "hostname" in svc else [])}


def volume_mounts(service: dict) -> list[tuple[str, str]]:
    mounts = []
    for item in service.get("volumes") or []:
        if isinstance(item, dict):
            mounts.append((str(item.get("source", "")), str(item["target"])))
        else:
            parts = str(item).split(":")
            mounts.append((parts[0], parts[1]) if len(parts) > 1 else ("", parts[0]))
    return mounts


def referenced(value: object) -> set[str]:
    """The variables a raw compose value names."""
    return {m.group("name") for m in VAR.finditer(str(value))}


def published_targets(service: dict) -> set[int]:
    targets = set()
    for item in service.get("ports") or []:
        if isinstance(item, dict):
            targets.add(int(item["target"]))
        else:
            targets.add(int(str(item).split(":")[-1].split("/")[0]))
    for item in service.get("expose") or []:
        targets.add(int(str(item).split("/")[0]))
    return targets


# ------------------------------------------------------------------------------ services


def test_the_services_exist(services: dict) -> None:
    assert {*BROKERS, "kafka-init", "clickhouse", "migrate", "worker", "scheduler", "api"} <= set(services)
    assert "kafka" not in services, "the single broker is replaced by kafka-1..3"
    for broker in BROKERS:
        assert services[broker]["image"] == "apache/kafka:4.1.1", broker
    assert services["kafka-init"]["image"] == services["kafka-1"]["image"]
    assert re.fullmatch(r"clickhouse/clickhouse-server:2[56]\.\d+(\.\d+)*", services["clickhouse"]["image"]), (
        "ClickHouse must be pinned to a 25.x/26.x tag"
    )


def test_app_services_run_the_right_commands(services: dict) -> None:
    assert command(services["worker"]) == ["worker"]
    assert command(services["scheduler"]) == ["scheduler"]
    assert command(services["api"]) == ["serve", "--listen", "0.0.0.0:8080"]


def test_migrations_run_once_before_the_app_services(services: dict) -> None:
    migrate = services["migrate"]
    assert command(migrate) == ["db", "migrate"]
    assert migrate.get("restart", "no") == "no"
    # the same database, as the one user that may change its schema
    migrate_dsn, app_dsn = urlsplit(env(migrate)["GPUBILL_CLICKHOUSE"]), urlsplit(env(services["worker"])["GPUBILL_CLICKHOUSE"])
    assert (migrate_dsn.hostname, migrate_dsn.port, migrate_dsn.path) == (app_dsn.hostname, app_dsn.port, app_dsn.path)
    assert migrate_dsn.username == "gpubill_migrate" and app_dsn.username == "gpubill"
    for name in APP_SERVICES:
        assert depends_on(services[name]).get("migrate", {}).get("condition") == "service_completed_successfully", name


def test_depends_on_points_at_existing_services_with_valid_conditions(services: dict) -> None:
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, svc in services.items():
        for dep, spec in depends_on(svc).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert dep != name
            condition = spec.get("condition", "service_started")
            assert condition in conditions, f"{name} → {dep}: {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy but it has no healthcheck"
            if condition == "service_completed_successfully":
                assert services[dep].get("restart", "no") == "no", f"{dep} is one-shot; it must not restart"
    for name in APP_SERVICES:
        deps = depends_on(services[name])
        assert deps.get("clickhouse", {}).get("condition") == "service_healthy", name
    for name in ("kafka-init", *(n for n, svc in services.items() if "GPUBILL_KAFKA" in raw_env(svc))):
        deps = depends_on(services[name])
        for broker in BROKERS:  # topics with three replicas need the three brokers
            assert deps.get(broker, {}).get("condition") == "service_healthy", f"{name} → {broker}"
        if name != "kafka-init":
            assert deps.get("kafka-init", {}).get("condition") == "service_completed_successfully", name


def test_every_build_context_has_a_dockerfile(services: dict) -> None:
    built = 0
    for name, svc in services.items():
        if "build" not in svc:
            continue
        build = svc["build"]
        context = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        path = (ROOT / context / dockerfile).resolve()
        assert path.is_file(), f"{name}: build context {context} has no {dockerfile}"
        assert (ROOT / context / "pyproject.toml").is_file(), f"{name}: {context} is not the project"
        built += 1
    assert "build" in services["worker"] and "build" in services["scheduler"]
    assert built >= 2


def test_named_volumes_and_mounted_files_exist(compose: dict, services: dict) -> None:
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for source, _target in volume_mounts(svc):
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is missing"
            elif source and not source.startswith(("/", "~")):
                assert source in declared, f"{name} uses undeclared volume {source}"
    assert any(t == "/var/lib/clickhouse" for _, t in volume_mounts(services["clickhouse"]))


# ------------------------------------------------------------------------------ secrets


def test_every_password_is_required_and_none_has_a_default(compose: dict) -> None:
    text = COMPOSE.read_text(encoding="utf-8").replace("$$", "")
    passwords = [m for m in VAR.finditer(text) if "PASSWORD" in m.group("name")]
    assert len({m.group("name") for m in passwords}) >= 9
    for match in passwords:
        assert match.group("op") == ":?", f"{match.group(0)}: a password must be required (${{VAR:?message}})"
        assert match.group("default").strip(), f"{match.group(0)}: say how to set it"
    for match in VAR.finditer(text):
        assert match.group("op") in (":-", "-", ":?", "?"), f"{match.group(0)}: give it a default or make it required"


def test_no_default_password_anywhere_in_compose_or_deploy() -> None:
    files = [COMPOSE, *sorted(p for p in DEPLOY.rglob("*") if p.is_file())]
    for path in files:
        text = path.read_text(encoding="utf-8").lower()
        for word in ("change-me", "changeme", "password123", "secret123"):
            assert word not in text, f"{path.relative_to(ROOT)} holds a default password ({word})"
    for path in DEPLOY.rglob("*.xml"):
        for password in ET.parse(path).getroot().iter("password"):
            assert password.get("from_env") and not (password.text or "").strip(), (
                f"{path.relative_to(ROOT)}: a password comes from the environment, never the file"
            )
        for tag in ("password_sha256_hex", "password_double_sha1_hex"):
            assert next(ET.parse(path).getroot().iter(tag), None) is None, f"{path.name}: no fixed {tag}"


def test_each_container_gets_only_its_own_secrets(services: dict) -> None:
    def secrets(name: str) -> set[str]:
        return {v for value in raw_env(services[name]).values() for v in referenced(value) if "PASSWORD" in v}

    assert secrets("worker") == {"GPUBILL_CH_PASSWORD", "GPUBILL_KAFKA_WORKER_PASSWORD"}
    assert secrets("scheduler") == {"GPUBILL_CH_PASSWORD"}  # no Kafka at all
    assert secrets("api") == {"GPUBILL_CH_PASSWORD"}
    assert secrets("migrate") == {"GPUBILL_CH_MIGRATE_PASSWORD"}
    assert secrets("kafka-init") == {"GPUBILL_KAFKA_ADMIN_PASSWORD"}
    assert "GPUBILL_CH_ADMIN_PASSWORD" in secrets("clickhouse")
    assert secrets("migrate-cluster") == {"GPUBILL_CH_MIGRATE_PASSWORD"}
    for name in ("worker", "scheduler", "migrate", "migrate-cluster", "kafka-init", *BROKERS, *KEEPERS):
        assert "GPUBILL_CH_ADMIN_PASSWORD" not in secrets(name), name
    # the nodes' shared secret is theirs alone
    for name in services:
        assert ("GPUBILL_CH_INTERSERVER_PASSWORD" in secrets(name)) == (name in CH_NODES), name
    for name in KEEPERS:
        assert not secrets(name), name
    for name in ("clickhouse", "migrate", "worker", "scheduler"):
        assert not {s for s in secrets(name) if s.startswith("GPUBILL_KAFKA_") and s != "GPUBILL_KAFKA_WORKER_PASSWORD"}


def test_no_secret_is_on_a_command_line(services: dict) -> None:
    for name, svc in services.items():
        lines = [command(svc)]
        if "healthcheck" in svc:
            test = svc["healthcheck"]["test"]
            lines.append(test if isinstance(test, list) else [test])
        for line in lines:
            text = " ".join(map(str, line))
            assert "PASSWORD" not in text.upper() and "--password" not in text, f"{name}: {text}"
            assert not referenced(text), f"{name}: no variable is expanded into a command line"


def test_every_published_port_is_on_loopback(services: dict) -> None:
    for name, svc in services.items():
        for item in svc.get("ports") or []:
            if isinstance(item, dict):
                assert item.get("host_ip") == "127.0.0.1", f"{name}: {item}"
            else:
                assert str(item).startswith("127.0.0.1:"), f"{name}: {item} is published on every interface"


def test_app_settings_load_and_say_sasl(services: dict, monkeypatch) -> None:
    """What gpubill reads from each container's environment is valid settings."""
    from gpubill.config import load_settings

    for name in GPUBILL_SERVICES:
        for key in [k for k in os.environ if k.startswith("GPUBILL_")]:
            monkeypatch.delenv(key)
        monkeypatch.setenv("GPUBILL_SETTINGS", "/nonexistent/gpubill.toml")
        for key, value in env(services[name]).items():
            monkeypatch.setenv(key, value)
        settings = load_settings()
        if name == "worker":
            assert settings.kafka_security_protocol == "SASL_PLAINTEXT" and settings.kafka_username == "worker"
            assert settings.kafka_password.get_secret_value() == fake_secret("GPUBILL_KAFKA_WORKER_PASSWORD")
            assert fake_secret("GPUBILL_KAFKA_WORKER_PASSWORD") not in repr(settings)
        else:
            assert settings.kafka_password is None


# ------------------------------------------------------------------------------ Kafka


def _server_properties(services: dict, broker: str) -> dict[str, str]:
    """deploy/kafka/start.sh's server.properties as the service `broker` renders it."""
    script = (DEPLOY / "kafka" / "start.sh").read_text(encoding="utf-8")
    body = re.search(r'cat > "\$conf_dir/server.properties" <<PROPERTIES\n(.*?)\nPROPERTIES\n', script, re.DOTALL).group(1)
    values = {**env(services[broker]), "data_dir": "/var/lib/kafka/data",
              "scram": "org.apache.kafka.common.security.scram.ScramLoginModule required",
              "plain": "org.apache.kafka.common.security.plain.PlainLoginModule required"}

    def sub(match: re.Match) -> str:
        assert match.group(1) in values, f"start.sh uses ${{{match.group(1)}}}, which {broker} does not set"
        return values[match.group(1)]

    props = {}
    for line in body.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            assert key not in props, f"start.sh sets {key} twice"
            props[key] = re.sub(r"\$\{([A-Za-z_]+)\}", sub, value)
    return props


def _scram_users() -> set[str]:
    script = (DEPLOY / "kafka" / "start.sh").read_text(encoding="utf-8")
    return set(re.findall(r'--add-scram "SCRAM-SHA-(?:256|512)=\[name=([\w.-]+),password=', script))


def _protocols(props: dict[str, str]) -> dict[str, str]:
    return dict(item.split(":") for item in props["listener.security.protocol.map"].split(","))


@pytest.mark.parametrize("broker", BROKERS)
def test_each_broker_is_a_kraft_node_of_the_three(services: dict, broker: str) -> None:
    props = _server_properties(services, broker)
    assert props["node.id"] == broker.removeprefix("kafka-")  # kafka-N is node N
    assert services[broker]["hostname"] == broker
    assert set(props["process.roles"].split(",")) == {"broker", "controller"}
    listen = listeners(props["listeners"])
    controller_names = props["controller.listener.names"].split(",")
    assert controller_names and all(n in listen for n in controller_names)
    assert set(listen) <= set(_protocols(props))
    # the controller listens on the compose network: the other two nodes' controllers and
    # brokers reach it there
    controller_host, controller_port = listen[controller_names[0]]
    assert controller_host == "0.0.0.0", f"{broker}: the other nodes cannot reach {controller_host}"
    # a controller listener is never advertised to clients nor published on the host
    advertised = listeners(props["advertised.listeners"])
    assert not set(advertised) & set(controller_names)
    assert set(advertised) <= set(listen)
    assert controller_port not in published_targets(services[broker])
    assert props["inter.broker.listener.name"] in advertised
    assert advertised[props["inter.broker.listener.name"]] == (broker, listen[props["inter.broker.listener.name"]][1])
    assert env(services[broker])["KAFKA_LISTENERS"] == props["listeners"]


def test_the_quorum_is_the_three_nodes_on_their_controller_listeners(services: dict) -> None:
    nodes = {}  # node id → (host, controller port)
    voters = set()
    for broker in BROKERS:
        props = _server_properties(services, broker)
        listen = listeners(props["listeners"])
        nodes[props["node.id"]] = (broker, listen[props["controller.listener.names"].split(",")[0]][1])
        voters.add(props["controller.quorum.voters"])
    assert len(voters) == 1, f"the brokers disagree on the quorum: {voters}"
    named = {}
    for voter in voters.pop().split(","):
        voter_id, _, address = voter.partition("@")
        assert voter_id not in named, f"voter {voter_id} twice"
        named[voter_id] = host_port(address)
    assert named == nodes, "every node votes, each under its own id, at its controller listener"
    assert sorted(nodes) == ["1", "2", "3"]


def test_every_broker_speaks_to_the_host_on_its_own_loopback_port(services: dict) -> None:
    ports = set()
    for broker in BROKERS:
        props = _server_properties(services, broker)
        listen, advertised = listeners(props["listeners"]), listeners(props["advertised.listeners"])
        host = advertised["HOST"]
        assert host[0] == "localhost"
        # what the broker tells a host client to connect to is its published host port, which
        # Docker forwards to the port the HOST listener listens on
        published = {(str(item).rsplit(":", 2)[1], str(item).rsplit(":", 2)[2]) for item in services[broker]["ports"]}
        assert (str(host[1]), str(listen["HOST"][1])) in published, f"{broker}: {host} is not published"
        ports.add(host[1])
    assert ports == {29092, 29093, 29094}


def test_kafka_authenticates_every_listener_and_authorises_with_acls(services: dict) -> None:
    for broker in BROKERS:
        props = _server_properties(services, broker)
        protocols = _protocols(props)
        assert set(protocols.values()) == {"SASL_PLAINTEXT"}, "no PLAINTEXT listener: every client logs in"
        mechanisms = props["sasl.enabled.mechanisms"].split(",")
        assert set(mechanisms) <= {"SCRAM-SHA-256", "SCRAM-SHA-512"}
        for name in protocols:
            if name == "CONTROLLER":
                assert props["listener.name.controller.sasl.enabled.mechanisms"] == "PLAIN"
                assert props["sasl.mechanism.controller.protocol"] == "PLAIN"
                assert 'username="controller"' in props["listener.name.controller.plain.sasl.jaas.config"]
                continue
            for mechanism in mechanisms:
                jaas = props[f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"]
                assert jaas.startswith("org.apache.kafka.common.security.scram.ScramLoginModule required")
                assert jaas.endswith(";")
        inter = props["inter.broker.listener.name"].lower()
        broker_jaas = props[f"listener.name.{inter}.{props['sasl.mechanism.inter.broker.protocol'].lower()}.sasl.jaas.config"]
        assert f'password="{fake_secret("GPUBILL_KAFKA_BROKER_PASSWORD")}"' in broker_jaas
        assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        assert props["allow.everyone.if.no.acl.found"] == "false"
        assert props["auto.create.topics.enable"] == "false"
        supers = {p.removeprefix("User:") for p in props["super.users"].split(";")}
        assert supers == {"broker", "controller", "admin"}
    assert {"broker", "admin", "worker", "node-agent"} == _scram_users()


@pytest.mark.parametrize("broker", BROKERS)
def test_every_partition_survives_one_broker_down(services: dict, broker: str) -> None:
    """Three replicas, two in sync for an acks=all write, never an unclean leader: one broker
    may be down without losing an acknowledged record or refusing writes."""
    props = _server_properties(services, broker)
    assert props["default.replication.factor"] == str(REPLICATION)
    assert props["min.insync.replicas"] == str(MIN_INSYNC)
    assert props["offsets.topic.replication.factor"] == str(REPLICATION)
    assert props["transaction.state.log.replication.factor"] == str(REPLICATION)
    assert props["transaction.state.log.min.isr"] == str(MIN_INSYNC)
    assert props["unclean.leader.election.enable"] == "false"
    assert props["log.retention.ms"] == "-1"
    for key, value in props.items():
        if key.endswith("replication.factor"):
            assert value == str(REPLICATION), f"{key}={value}: one per broker"
        if key.endswith(("min.isr", "min.insync.replicas")):
            assert value == str(MIN_INSYNC), f"{key}={value}"


def test_kafka_cluster_id_is_one_valid_kraft_id(services: dict) -> None:
    ids = {env(services[broker])["CLUSTER_ID"] for broker in BROKERS}
    assert len(ids) == 1, f"the three nodes are formatted with different cluster ids: {ids}"
    cluster_id = ids.pop()
    assert len(cluster_id) == 22
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


@pytest.mark.parametrize("broker", BROKERS)
def test_kafka_healthcheck_logs_in_from_a_file(services: dict, broker: str) -> None:
    test = services[broker]["healthcheck"]["test"]
    text = " ".join(test) if isinstance(test, list) else test
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in text
    bootstrap = re.search(r"--bootstrap-server\s+(\S+)", text)
    assert bootstrap
    _host, port = host_port(bootstrap.group(1))
    assert port in {p for _, p in listeners(_server_properties(services, broker)["listeners"]).values()}
    config = re.search(r"--command-config\s+(\S+)", text).group(1)
    script = (DEPLOY / "kafka" / "start.sh").read_text(encoding="utf-8")
    conf_dir = re.search(r'conf_dir="\$\{KAFKA_CONF_DIR:-([^}]+)\}"', script).group(1)
    assert config == f"{conf_dir}/client.properties"
    assert 'cat > "$conf_dir/client.properties"' in script
    assert "KAFKA_CONF_DIR" not in env(services[broker])


def test_every_kafka_client_bootstraps_from_the_three_brokers(services: dict) -> None:
    clients = {name: env(svc)["GPUBILL_KAFKA"] for name, svc in services.items() if "GPUBILL_KAFKA" in raw_env(svc)}
    assert {"worker", "spend-tracker"} <= set(clients)
    clients["kafka-init"] = env(services["kafka-init"])["KAFKA_BOOTSTRAP"]
    for name, bootstrap in clients.items():
        assert sorted(bootstrap.split(",")) == [f"{broker}:9092" for broker in BROKERS], f"{name}: {bootstrap}"


def test_app_services_use_an_advertised_listener_with_its_protocol(services: dict) -> None:
    wenv = env(services["worker"])
    servers = [host_port(server.strip()) for server in wenv["GPUBILL_KAFKA"].split(",")]
    for broker in BROKERS:
        props = _server_properties(services, broker)
        listen = listeners(props["listeners"])
        advertised = listeners(props["advertised.listeners"])
        inside = {name: address for name, address in advertised.items() if address[0] in service_names(services, broker)}
        assert inside, f"no listener is advertised under {broker}'s name"
        matches = [ln for ln, address in inside.items() if address in servers]
        assert len(matches) == 1, f"worker: none of {servers} is advertised by {broker} ({advertised})"
        assert listen[matches[0]][1] == inside[matches[0]][1]
        assert _protocols(props)[matches[0]] == wenv["GPUBILL_KAFKA_SECURITY_PROTOCOL"]
        assert wenv["GPUBILL_KAFKA_SASL_MECHANISM"] in props["sasl.enabled.mechanisms"].split(",")
    assert wenv["GPUBILL_KAFKA_USERNAME"] in _scram_users()


def _acls() -> list[list[str]]:
    lines = (DEPLOY / "kafka" / "acls.txt").read_text(encoding="utf-8").splitlines()
    return [line.split() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_acls_give_each_role_only_what_it_needs(services: dict) -> None:
    from schemas.topics import PIPELINE_TOPICS, READING_TOPICS, TOPIC_CORRECTIONS, TOPIC_DEADLETTER

    rows = _acls()
    assert rows and all(len(row) == 5 for row in rows)
    for principal, operation, resource, pattern, name in rows:
        assert principal in _scram_users() - {"broker", "admin"}, principal
        assert resource in ("topic", "group", "cluster", "transactional-id") and pattern in ("literal", "prefixed")
        assert name != "*" and not (pattern == "prefixed" and len(name) < 5), "no wildcard grants"
    agent = {(op, res, pat, name) for who, op, res, pat, name in rows if who == "node-agent"}
    assert agent == {("Write", "topic", "literal", topic) for topic in READING_TOPICS.values()}
    worker = {(op, res, pat, name) for who, op, res, pat, name in rows if who == "worker"}
    assert {("Read", "topic", "literal", topic) for topic in PIPELINE_TOPICS} <= worker
    assert ("Write", "topic", "literal", TOPIC_DEADLETTER) in worker
    assert ("Read", "topic", "literal", TOPIC_CORRECTIONS) in worker  # its sync reads the log of corrections
    assert not any(op in ("Write", "All") and name == TOPIC_CORRECTIONS for _, op, _, _, name in rows)
    assert not {("Write", "topic", "literal", topic) for topic in READING_TOPICS.values()} & worker
    group = env(services["worker"])["GPUBILL_GROUP"]
    assert any(res == "group" and op == "Read" and (name == group or (pat == "prefixed" and group.startswith(name)))
               for op, res, pat, name in worker), "the worker may not join its group"


def _init_topics(services: dict) -> dict[str, dict]:
    """The topics deploy/kafka/init.sh creates, as kafka-init runs it: {name: {"partitions",
    "replication", "configs"}}, read from its create_topic function and its calls."""
    script = (DEPLOY / "kafka" / "init.sh").read_text(encoding="utf-8")
    ienv = env(services["kafka-init"])
    values = {"KAFKA_PARTITIONS": ienv.get("KAFKA_PARTITIONS", "8")}
    for var, name in (("replication", "KAFKA_REPLICATION"), ("min_insync", "KAFKA_MIN_INSYNC")):
        default = re.search(rf'^{var}="\$\{{{name}:-(\d+)\}}"$', script, re.MULTILINE).group(1)
        values[var] = ienv.get(name, default)
    function = re.search(r"^create_topic\(\) \{\n(.*?)^\}", script, re.MULTILINE | re.DOTALL).group(1)
    assert '"$bin/kafka-topics.sh"' in function and "--create --if-not-exists" in function
    assert function.count("kafka-topics.sh") == 1 and '"$@"' in function
    assert re.search(r'--replication-factor "\$replication"', function)
    common = re.findall(r'--config "?([\w.]+)=([^"\s]+)"?', function)
    assert "kafka-topics.sh" not in script.replace(function, ""), "every topic is created by create_topic"

    def resolve(word: str) -> str:
        word = word.strip('"')
        word = re.sub(r"\$\{KAFKA_PARTITIONS:-\d+\}", values["KAFKA_PARTITIONS"], word)
        return re.sub(r"\$(\w+)", lambda m: values[m.group(1)], word)

    calls = []
    loop = re.search(r"^for topic in ([^;]+); do\n\s+create_topic \"\$topic\" (\S+)\ndone", script, re.MULTILINE)
    for topic in loop.group(1).split():
        calls.append([topic, loop.group(2)])
    for call in re.findall(r"^create_topic ((?:[^\n\\]|\\\n)+)", script, re.MULTILINE):
        calls.append(call.replace("\\\n", " ").split())
    topics = {}
    for topic, partitions, *rest in calls:
        assert topic not in topics, f"init.sh creates {topic} twice"
        assert rest[::2] == ["--config"] * (len(rest) // 2) and len(rest) % 2 == 0, f"{topic}: {rest}"
        configs = {k: resolve(v) for k, v in common}
        for item in rest[1::2]:
            key, _, value = item.partition("=")
            assert key not in configs, f"{topic}: {key} is set twice"
            configs[key] = value
        topics[topic] = {"partitions": int(resolve(partitions)), "replication": int(values["replication"]), "configs": configs}
    return topics


def test_kafka_init_creates_every_topic_of_the_schema(services: dict) -> None:
    import schemas.topics as names
    from schemas.topics import PIPELINE_TOPICS, spend_changelog_topic, spend_topic

    script = (DEPLOY / "kafka" / "init.sh").read_text(encoding="utf-8")
    listed = re.search(r"for topic in ([^;]+); do", script).group(1).split()
    assert tuple(listed) == PIPELINE_TOPICS
    group = env(services["worker"])["GPUBILL_GROUP"]
    expected = {value for key, value in vars(names).items() if key.startswith("TOPIC_")}
    expected |= {spend_topic(group), spend_changelog_topic(group)}
    assert len(expected) == 8  # usage, power, dead letters, billing events, corrections, books, spend ×2
    assert set(_init_topics(services)) == expected
    assert "acls.txt" in script


def test_kafka_init_gives_every_topic_three_replicas_two_in_sync_and_no_unclean_leader(services: dict) -> None:
    ienv = env(services["kafka-init"])
    assert (ienv["KAFKA_REPLICATION"], ienv["KAFKA_MIN_INSYNC"]) == (str(REPLICATION), str(MIN_INSYNC))
    for topic, spec in _init_topics(services).items():
        assert spec["replication"] == REPLICATION, topic
        assert spec["configs"]["min.insync.replicas"] == str(MIN_INSYNC), topic
        assert spec["configs"]["unclean.leader.election.enable"] == "false", topic
    # the defaults, for `docker compose run kafka-init` with an older environment
    script = (DEPLOY / "kafka" / "init.sh").read_text(encoding="utf-8")
    assert f'replication="${{KAFKA_REPLICATION:-{REPLICATION}}}"' in script
    assert f'min_insync="${{KAFKA_MIN_INSYNC:-{MIN_INSYNC}}}"' in script
    assert "KAFKA_BOOKS_REPLICATION" not in script


def test_kafka_init_configures_each_topic_as_the_code_does(services: dict) -> None:
    """Partitions and configs as streams/kafka/*.py would create them (one order for the books)."""
    from schemas.topics import (PIPELINE_TOPICS, TOPIC_BILLING_EVENTS, TOPIC_BOOKS, TOPIC_CORRECTIONS,
                                spend_changelog_topic, spend_topic)
    from streams.kafka.admin import EVENTS_TOPIC_CONFIG, SPEND_TOPIC_CONFIG
    from streams.kafka.books import BOOKS_TOPIC_CONFIG
    from streams.kafka.corrections import CORRECTIONS_TOPIC_CONFIG

    topics = _init_topics(services)
    group = env(services["worker"])["GPUBILL_GROUP"]
    wanted = {TOPIC_BOOKS: BOOKS_TOPIC_CONFIG, TOPIC_CORRECTIONS: CORRECTIONS_TOPIC_CONFIG,
              TOPIC_BILLING_EVENTS: EVENTS_TOPIC_CONFIG, spend_topic(group): SPEND_TOPIC_CONFIG,
              spend_changelog_topic(group): SPEND_TOPIC_CONFIG}
    for topic, configs in wanted.items():
        assert configs.items() <= topics[topic]["configs"].items(), f"{topic}: {topics[topic]['configs']}"
    assert topics[TOPIC_BOOKS]["partitions"] == 1
    for topic in PIPELINE_TOPICS:
        assert topics[topic]["partitions"] == TOPIC_PARTITIONS, topic


def test_live_spend_has_its_tracker_service_its_topics_and_its_acls(services: dict) -> None:
    """The spend tracker runs as its own service (issue 26) with the worker's Kafka user; the
    topics it and the workers use exist as streams/kafka/admin.py would create them, and
    acls.txt lets that user produce and read them."""
    from schemas.topics import TOPIC_BILLING_EVENTS, spend_changelog_topic, spend_topic
    from streams.kafka.admin import EVENTS_TOPIC_CONFIG, SPEND_TOPIC_CONFIG

    tracker = services["spend-tracker"]
    assert tracker["command"] == ["spend-tracker"]
    assert env(tracker)["GPUBILL_KAFKA_USERNAME"] == env(services["worker"])["GPUBILL_KAFKA_USERNAME"] == "worker"
    group = env(services["worker"])["GPUBILL_GROUP"]
    spend = spend_topic(group)
    topics = _init_topics(services)
    assert SPEND_TOPIC_CONFIG.items() <= topics[spend]["configs"].items()
    assert EVENTS_TOPIC_CONFIG.items() <= topics[TOPIC_BILLING_EVENTS]["configs"].items()
    rows = [line.split() for line in (DEPLOY / "kafka" / "acls.txt").read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.startswith("#")]
    worker = {(op, res, pat, name) for who, op, res, pat, name in rows if who == "worker"}
    for topic in (spend, TOPIC_BILLING_EVENTS):
        assert {("Write", "topic", "literal", topic), ("Read", "topic", "literal", topic)} <= worker
    changelog = spend_changelog_topic(group)
    assert any(op == "All" and pat == "prefixed" and changelog.startswith(name) for op, res, pat, name in worker)
    assert SPEND_TOPIC_CONFIG.items() <= topics[changelog]["configs"].items()


def test_kafka_scripts_are_bash_that_parses() -> None:
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    for script in (DEPLOY / "kafka").glob("*.sh"):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"


# ------------------------------------------------------------------------------ ClickHouse


def _users_files(services: dict) -> dict[str, ET.Element]:
    found = {}
    for source, target in volume_mounts(services["clickhouse"]):
        if target.startswith("/etc/clickhouse-server/users.d/") and source.startswith("./deploy/"):
            assert target.endswith(".xml") and source.endswith(".xml")
            root = ET.parse(ROOT / source).getroot()
            assert root.tag == "clickhouse"
            found[Path(source).name] = root
    assert found, "clickhouse mounts no users.d file from ./deploy/"
    return found


def _user(services: dict, name: str) -> tuple[ET.Element, ET.Element]:
    for root in _users_files(services).values():
        user = root.find(f"users/{name}")
        if user is not None:
            return root, user
    pytest.fail(f"no <users><{name}> in the mounted users files")


def _password_var(services: dict, user: ET.Element) -> str:
    """The compose variable the user's password comes from (via the container's env)."""
    password = user.find("password")
    assert password is not None and password.get("from_env")
    container_var = password.get("from_env")
    names = referenced(raw_env(services["clickhouse"]).get(container_var, ""))
    assert len(names) == 1, f"{container_var} is not set from one compose variable"
    return names.pop()


def test_app_dsns_point_at_the_clickhouse_service_as_their_users(services: dict) -> None:
    chenv = env(services["clickhouse"])
    assert chenv["CLICKHOUSE_DB"] == "gpubill"
    for name, user in (("worker", "gpubill"), ("scheduler", "gpubill"), ("api", "gpubill"), ("migrate", "gpubill_migrate")):
        dsn = urlsplit(env(services[name])["GPUBILL_CLICKHOUSE"])
        assert dsn.scheme == "http"
        assert dsn.hostname in service_names(services, "clickhouse")
        assert dsn.port == 8123
        assert dsn.path.strip("/") == chenv["CLICKHOUSE_DB"]
        assert unquote(dsn.username or "") == user
        # the same compose variable feeds the DSN and the user's password on the server
        var = _password_var(services, _user(services, user)[1])
        assert unquote(dsn.password or "") == fake_secret(var)
        assert var in referenced(raw_env(services[name])["GPUBILL_CLICKHOUSE"])
    assert chenv["CLICKHOUSE_USER"] not in ("gpubill", "gpubill_migrate", "finance")


def test_the_application_user_cannot_manage_access_nor_leave_its_database(services: dict) -> None:
    for name in ("gpubill", "gpubill_migrate"):
        _root, user = _user(services, name)
        assert (user.findtext("access_management") or "0") == "0", name
        grants = [q.text.strip() for q in user.findall("grants/query")]
        assert grants, name
        if name == "gpubill_migrate":  # ON CLUSTER DDL (migrate-cluster); nothing else outside gpubill.*
            assert grants.count("GRANT CLUSTER ON *.*") == 1
            grants.remove("GRANT CLUSTER ON *.*")
        for grant in grants:
            assert re.fullmatch(r"GRANT [A-Z ,]+ ON gpubill\.\*", grant), f"{name}: {grant}"
            assert not re.search(r"\bALL\b|ACCESS|GRANT OPTION|SYSTEM|USER|ROLE|DATABASE|DICTIONARY", grant[6:])
    app = " ".join(q.text for q in _user(services, "gpubill")[1].findall("grants/query"))
    # what the code needs: reads, inserts, lightweight DELETE / ALTER … DELETE / DROP PARTITION
    for privilege in ("SELECT", "INSERT", "ALTER DELETE", "CREATE TABLE", "DROP TABLE"):
        assert privilege in app
    assert "CREATE VIEW" not in app and "ALTER," not in app and not app.rstrip().endswith("ALTER ON gpubill.*")
    assert "CREATE VIEW" in " ".join(q.text for q in _user(services, "gpubill_migrate")[1].findall("grants/query"))


def test_users_accept_only_the_compose_network_and_loopback(compose: dict, services: dict) -> None:
    subnet = interpolate("${GPUBILL_SUBNET:-172.30.64.0/24}")
    configured = [c["subnet"] for c in compose["networks"]["default"]["ipam"]["config"]]
    assert [interpolate(s) for s in configured] == [subnet], configured
    chenv = env(services["clickhouse"])
    for name in ("gpubill", "gpubill_migrate", "finance", "healthcheck"):
        _root, user = _user(services, name)
        ips = []
        for ip in user.findall("networks/ip"):
            ips.append(chenv[ip.get("from_env")] if ip.get("from_env") else (ip.text or "").strip())
        assert ips and set(ips) <= {subnet, "127.0.0.1", "::1"}, f"{name}: {ips}"
        assert not user.findall("networks/host_regexp") and not user.findall("networks/host")
    assert {ip.text for ip in _user(services, "healthcheck")[1].findall("networks/ip")} == {"127.0.0.1", "::1"}


def test_clickhouse_healthcheck_needs_no_password(services: dict) -> None:
    hc = services["clickhouse"]["healthcheck"]
    test = " ".join(hc["test"]) if isinstance(hc["test"], list) else hc["test"]
    assert "--user healthcheck" in test and "EXISTS DATABASE gpubill" in test
    root, user = _user(services, "healthcheck")
    assert user.find("no_password") is not None
    profile = root.find(f"profiles/{user.findtext('profile')}")
    assert profile is not None and profile.findtext("readonly") == "1"
    assert [q.text for q in user.findall("grants/query")] == ["GRANT SHOW DATABASES ON gpubill.*"]


def test_finance_user_is_read_only_limited_and_cannot_lift_its_limits(services: dict) -> None:
    root, user = _user(services, "finance")
    profile = root.find(f"profiles/{user.findtext('profile')}")
    assert profile is not None, "the finance profile is defined in the same file"
    assert profile.findtext("readonly") == "1"
    assert (user.findtext("access_management") or "0") == "0"
    # every table but api_keys' secret hashes (issue 36: the gateway refuses the column to finance too)
    assert [q.text.strip() for q in user.findall("grants/query")] == [
        "GRANT SELECT ON gpubill.*", "REVOKE SELECT(secret_sha256) ON gpubill.api_keys"]
    limits = ("max_execution_time", "max_memory_usage", "max_result_rows", "max_concurrent_queries_for_user")
    for limit in limits:
        assert int(profile.findtext(limit)) > 0, limit
    assert profile.findtext("result_overflow_mode") == "throw"
    constraints = profile.find("constraints")
    for setting in ("readonly", *limits):
        node = constraints.find(setting)
        assert node is not None and (node.find("readonly") is not None or node.find("const") is not None), setting
    quota = root.find(f"quotas/{user.findtext('quota')}")
    assert quota is not None and int(quota.findtext("interval/duration")) > 0 and int(quota.findtext("interval/queries")) > 0
    assert _password_var(services, user) == "GPUBILL_FINANCE_PASSWORD"


# ------------------------------------------------------------------------------ ClickHouse cluster


def _xml(name: str) -> ET.Element:
    root = ET.parse(CLUSTER / name).getroot()
    assert root.tag == "clickhouse", name
    return root


def _resolved(element: ET.Element, service: dict) -> str:
    """An XML value as the container sees it: its text, or its from_env variable's value."""
    if element.get("from_env"):
        values = env(service)
        assert element.get("from_env") in values, f"{element.tag} reads {element.get('from_env')}, which is not set"
        return values[element.get("from_env")]
    return (element.text or "").strip()


def _mounted(service: dict, source: str) -> str:
    targets = [t for s_, t in volume_mounts(service) if s_ == source]
    assert len(targets) == 1, f"{source} is not mounted once"
    return targets[0]


def test_the_cluster_profile_is_the_cluster_and_nothing_else(services: dict) -> None:
    profiled = {name for name, svc in services.items() if svc.get("profiles")}
    assert profiled == {*CH_NODES, *KEEPERS, "migrate-cluster"}
    assert all(services[name]["profiles"] == ["cluster"] for name in profiled)
    for name, svc in services.items():
        if name not in profiled:  # a default service waiting for a profiled one would not start
            assert not set(depends_on(svc)) & profiled, name
    image, _, version = services["clickhouse"]["image"].partition(":")
    for name in CH_NODES:
        assert services[name]["image"] == services["clickhouse"]["image"], name
        assert services[name]["hostname"] == name
    for name in KEEPERS:
        assert services[name]["image"] == f"clickhouse/clickhouse-keeper:{version}", name
        assert services[name]["hostname"] == name


def test_each_node_has_its_shard_and_a_replica_name_unique_in_the_cluster(services: dict) -> None:
    macros = _xml("clickhouse.xml").find("macros")
    seen = {}
    for name in CH_NODES:
        node = services[name]
        assert _mounted(node, "./deploy/clickhouse/cluster/clickhouse.xml").startswith("/etc/clickhouse-server/config.d/")
        shard, replica = _resolved(macros.find("shard"), node), _resolved(macros.find("replica"), node)
        assert shard in {"1", "2"}, f"{name}: shard {shard!r}"
        assert name.startswith(f"ch-s{shard}r"), f"{name} is in shard {shard}"
        # the replica macro is the node's name in the whole cluster, not its number in the
        # shard: tables replicated whole on every node share one path across both shards
        assert replica == name and replica not in seen.values(), f"{name}: replica {replica!r}"
        seen[name] = replica
    shards = [_resolved(macros.find("shard"), services[name]) for name in CH_NODES]
    assert sorted(shards) == ["1", "1", "2", "2"]
    assert _resolved(_xml("clickhouse.xml").find("interserver_http_host"), services["ch-s2r1"]) == "ch-s2r1"


def test_remote_servers_name_the_four_nodes_in_their_two_shards(services: dict) -> None:
    root = _xml("clickhouse.xml")
    clusters = root.find("remote_servers")
    assert [c.tag for c in clusters] == ["gpubill"]
    cluster = clusters.find("gpubill")
    macros = root.find("macros")
    shards = cluster.findall("shard")
    assert len(shards) == 2
    named = []
    for number, shard in enumerate(shards, start=1):
        assert shard.findtext("internal_replication") == "true", "the replicated tables copy a row, not the Distributed one"
        hosts = [r.findtext("host") for r in shard.findall("replica")]
        assert len(hosts) == 2
        for replica in shard.findall("replica"):
            host = replica.findtext("host")
            assert host in CH_NODES, host
            assert _resolved(macros.find("shard"), services[host]) == str(number), f"{host} is listed in shard {number}"
            assert replica.findtext("port") == "9000"
            # the secret, not a user and password per replica (those would run every forwarded
            # query as one user, whoever sent it)
            assert replica.find("user") is None and replica.find("password") is None
        named += hosts
    assert sorted(named) == sorted(CH_NODES)
    secret = cluster.find("secret")
    assert secret is not None and secret.get("from_env") and not (secret.text or "").strip()
    credentials = root.find("interserver_http_credentials")
    assert credentials.find("password").get("from_env") == secret.get("from_env")
    for name in CH_NODES:
        assert referenced(raw_env(services[name])[secret.get("from_env")]) == {"GPUBILL_CH_INTERSERVER_PASSWORD"}, name


def test_every_node_reaches_the_three_keepers(services: dict) -> None:
    nodes = _xml("clickhouse.xml").findall("zookeeper/node")
    keeper_port = _xml("keeper.xml").findtext("keeper_server/tcp_port")
    assert sorted(n.findtext("host") for n in nodes) == sorted(KEEPERS)
    assert {n.findtext("port") for n in nodes} == {keeper_port}
    for name in CH_NODES:  # one file for the four: each node lists every keeper
        assert depends_on(services[name]) == {k: {"condition": "service_healthy"} for k in KEEPERS}, name


def test_the_keepers_are_one_raft_quorum_with_distinct_ids(services: dict) -> None:
    root = _xml("keeper.xml")
    server = root.find("keeper_server")
    raft = {s.findtext("id"): (s.findtext("hostname"), s.findtext("port")) for s in server.findall("raft_configuration/server")}
    assert len(raft) == len(server.findall("raft_configuration/server")) == 3, "a raft id twice"
    ids = []
    for name in KEEPERS:
        keeper = services[name]
        assert _mounted(keeper, "./deploy/clickhouse/cluster/keeper.xml") == "/etc/clickhouse-keeper/keeper_config.xml"
        server_id = _resolved(server.find("server_id"), keeper)
        assert raft.get(server_id, ("",))[0] == name, f"{name} runs as raft id {server_id}, which is {raft.get(server_id)}"
        ids.append(server_id)
        data = [t for s_, t in volume_mounts(keeper) if s_ == f"{name}-data"]
        assert data and server.findtext("log_storage_path").startswith(data[0] + "/"), f"{name}: its log is not on its volume"
        assert server.findtext("snapshot_storage_path").startswith(data[0] + "/")
        hc = " ".join(keeper["healthcheck"]["test"])
        assert f"/dev/tcp/127.0.0.1/{server.findtext('tcp_port')}" in hc and "leader|follower" in hc
        assert not keeper.get("ports"), "the keepers are reached on the compose network only"
    assert sorted(ids) == ["1", "2", "3"]
    assert len({port for _, port in raft.values()}) == 1
    assert root.findtext("listen_host") == "0.0.0.0"


def test_cluster_nodes_have_the_single_nodes_users(services: dict) -> None:
    single = services["clickhouse"]
    users = {s_: t for s_, t in volume_mounts(single) if "/users.d/" in t}
    assert users
    for name in CH_NODES:
        node = services[name]
        assert {s_: t for s_, t in volume_mounts(node) if "/users.d/" in t} == users, name
        for key in ("CLICKHOUSE_DB", "CLICKHOUSE_USER", "GPUBILL_CLIENT_NETWORK", "FINANCE_NETWORK"):
            assert env(node)[key] == env(single)[key], f"{name}: {key}"
        for key in ("CLICKHOUSE_PASSWORD", "GPUBILL_APP_PASSWORD", "GPUBILL_MIGRATE_PASSWORD", "FINANCE_PASSWORD"):
            assert referenced(raw_env(node)[key]) == referenced(raw_env(single)[key]), f"{name}: {key}"
        assert node["healthcheck"]["test"] == single["healthcheck"]["test"]
        assert any(t == "/var/lib/clickhouse" and s_ == f"{name}-data" for s_, t in volume_mounts(node)), name


def test_migrate_cluster_applies_the_schema_to_the_cluster_as_the_migrate_user(services: dict) -> None:
    migrate = services["migrate-cluster"]
    assert command(migrate) == ["db", "migrate", "--cluster", "gpubill"]
    assert "gpubill" in [c.tag for c in _xml("clickhouse.xml").find("remote_servers")]
    assert migrate.get("restart", "no") == "no" and migrate["image"] == services["migrate"]["image"]
    dsn = urlsplit(env(migrate)["GPUBILL_CLICKHOUSE"])
    assert (dsn.hostname, dsn.port, dsn.path, dsn.username) == ("ch-s1r1", 8123, "/gpubill", "gpubill_migrate")
    assert unquote(dsn.password or "") == fake_secret("GPUBILL_CH_MIGRATE_PASSWORD")
    assert depends_on(migrate) == {n: {"condition": "service_healthy"} for n in CH_NODES}
    # the application stays on the single node: the profile never moves where invoices are kept
    for name in APP_SERVICES:
        assert urlsplit(env(services[name])["GPUBILL_CLICKHOUSE"]).hostname == "clickhouse", name


# ------------------------------------------------------------------------------ workers


def test_workers_scale_out_in_one_consumer_group(services: dict) -> None:
    worker = services["worker"]
    replicas = (worker.get("deploy") or {}).get("replicas", 1)
    assert 2 <= replicas <= TOPIC_PARTITIONS
    assert "container_name" not in worker, "a fixed container_name prevents replicas"
    assert env(worker)["GPUBILL_GROUP"] == env(services["scheduler"])["GPUBILL_GROUP"]
    assert env(worker)["GPUBILL_CLICKHOUSE"] == env(services["scheduler"])["GPUBILL_CLICKHOUSE"]


def test_worker_metrics_are_scraped_in_the_network_and_published_on_loopback(services: dict) -> None:
    worker = services["worker"]
    wenv = env(worker)
    port = int(wenv.get("GPUBILL_METRICS_PORT", "9464"))
    assert port in published_targets(worker)
    assert wenv["GPUBILL_METRICS_HOST"] == "0.0.0.0"  # Prometheus is another container
    for item in worker.get("ports") or []:
        # a fixed host port would collide between replicas
        assert isinstance(item, dict) and "published" not in item and item["host_ip"] == "127.0.0.1", item


def test_metrics_bind_loopback_unless_told() -> None:
    from gpubill.config import Settings

    assert Settings().metrics_host == "127.0.0.1"


# ------------------------------------------------------------------------------ image



def test_dockerfile_installs_the_project_as_non_root_with_gpubill_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    stages = [ln for ln in lines if ln.startswith("FROM ")]
    assert stages[-1] == "FROM python:3.11-slim"  # the image; a Rust stage before it builds native/
    assert re.search(r'pip install "?(/src|\.)(\[agent\])?\b', text)  # with the agent's extra: one image runs both
    # the native wheel is built from native/ and installed into the image
    assert any(ln.startswith("FROM rust:") and ln.endswith(" AS native") for ln in stages[:-1])
    assert "COPY native /native" in lines and "COPY --from=native /wheels /wheels" in lines
    assert re.search(r'pip install "/src\[agent\]" /wheels/\*\.whl', text)
    users = [ln.split(None, 1)[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert 'ENTRYPOINT ["gpubill"]' in lines


def test_dockerignore_keeps_what_pip_install_needs() -> None:
    ignored = {
        ln.strip().rstrip("/")
        for ln in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    needed = {"pyproject.toml", "gpubill", "streams", "reports", "schemas", "billing_rules", "native"}
    assert not needed & ignored
    assert {".venv", "var", ".git"} <= ignored
