"""Structural checks of compose.yaml, the Dockerfile and deploy/ (no Docker engine needed).

These read the files the way `docker compose` would (YAML, `${VAR:-default}`
interpolation with the defaults, `$$` escapes) and check that the pieces agree with
each other: the addresses the gpubill processes use are the ones the Kafka and
ClickHouse services actually listen on, every dependency and build context exists, and
the read-only finance user really is read-only.
"""

from __future__ import annotations

import base64
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml  # pyyaml, in the `test` extra

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
APP_SERVICES = ("worker", "scheduler")
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


def interpolate(value: object) -> str:
    """The value as compose resolves it with no variables set: `${X:-d}` → d, `$$` → `$`."""
    text = str(value)

    def sub(match: re.Match) -> str:
        assert match.group("op") in (":-", "-"), f"{match.group(0)} has no default; compose would need it set"
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


def test_the_four_services_exist(services: dict) -> None:
    assert {"kafka", "clickhouse", "worker", "scheduler"} <= set(services)
    assert services["kafka"]["image"] == "apache/kafka:4.1.1"
    assert re.fullmatch(r"clickhouse/clickhouse-server:2[56]\.\d+(\.\d+)*", services["clickhouse"]["image"]), (
        "ClickHouse must be pinned to a 25.x/26.x tag"
    )


def test_app_services_run_the_right_commands(services: dict) -> None:
    assert command(services["worker"]) == ["worker"]
    assert command(services["scheduler"]) == ["scheduler"]


def test_migrations_run_once_before_the_app_services(services: dict) -> None:
    migrate = services["migrate"]
    assert command(migrate) == ["db", "migrate"]
    assert migrate.get("restart", "no") == "no"
    assert env(migrate) == env(services["worker"])  # the same database
    for name in APP_SERVICES:
        assert depends_on(services[name]).get("migrate", {}).get("condition") == "service_completed_successfully", name


def test_every_variable_has_a_default(compose: dict) -> None:
    text = COMPOSE.read_text(encoding="utf-8").replace("$$", "")
    for match in VAR.finditer(text):
        assert match.group("op") in (":-", "-"), f"{match.group(0)}: give it a default"
    assert "${GPUBILL_CH_PASSWORD:-" in text


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
    assert depends_on(services["worker"]).get("kafka", {}).get("condition") == "service_healthy"


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


def test_named_volumes_are_declared(compose: dict, services: dict) -> None:
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        for source, _target in volume_mounts(svc):
            if source and not source.startswith((".", "/", "~")):
                assert source in declared, f"{name} uses undeclared volume {source}"
    assert any(t == "/var/lib/clickhouse" for _, t in volume_mounts(services["clickhouse"]))


# ------------------------------------------------------------------------------ Kafka


def test_kafka_is_a_single_node_kraft_broker(services: dict) -> None:
    kenv = env(services["kafka"])
    node_id = kenv["KAFKA_NODE_ID"]
    assert set(kenv["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    listen = listeners(kenv["KAFKA_LISTENERS"])
    controller_names = kenv["KAFKA_CONTROLLER_LISTENER_NAMES"].split(",")
    assert controller_names and all(n in listen for n in controller_names)
    assert "PLAINTEXT" in listen
    # every listener has a security protocol
    protocols = dict(item.split(":") for item in kenv["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert set(listen) <= set(protocols)
    # the quorum is this node, reached on its controller listener
    voters = kenv["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1
    voter_id, _, voter_address = voters[0].partition("@")
    assert voter_id == node_id
    voter_host, voter_port = host_port(voter_address)
    assert voter_host in service_names(services, "kafka")
    assert voter_port == listen[controller_names[0]][1]
    # a controller listener is never advertised to clients
    advertised = listeners(kenv["KAFKA_ADVERTISED_LISTENERS"])
    assert not set(advertised) & set(controller_names)
    assert set(advertised) <= set(listen)


def test_kafka_cluster_id_is_a_valid_kraft_id(services: dict) -> None:
    cluster_id = env(services["kafka"])["CLUSTER_ID"]
    assert len(cluster_id) == 22
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_kafka_internal_topics_have_replication_factor_one(services: dict) -> None:
    kenv = env(services["kafka"])
    assert kenv["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert kenv["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert kenv["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert kenv["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    for key, value in kenv.items():
        if key.endswith("REPLICATION_FACTOR") or key.endswith("MIN_ISR") or key == "KAFKA_MIN_INSYNC_REPLICAS":
            assert value == "1", f"{key}={value} cannot be met by one broker"


def test_kafka_healthcheck_asks_a_port_the_broker_listens_on(services: dict) -> None:
    kafka = services["kafka"]
    test = kafka["healthcheck"]["test"]
    text = " ".join(test) if isinstance(test, list) else test
    assert "/opt/kafka/bin/kafka-broker-api-versions.sh" in text
    bootstrap = re.search(r"--bootstrap-server\s+(\S+)", text)
    assert bootstrap
    _host, port = host_port(bootstrap.group(1))
    assert port in {p for _, p in listeners(env(kafka)["KAFKA_LISTENERS"]).values()}


def test_app_services_use_the_advertised_plaintext_listener(services: dict) -> None:
    kenv = env(services["kafka"])
    listen = listeners(kenv["KAFKA_LISTENERS"])
    advertised = listeners(kenv["KAFKA_ADVERTISED_LISTENERS"])
    protocols = dict(item.split(":") for item in kenv["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    inside = {name: address for name, address in advertised.items() if address[0] in service_names(services, "kafka")}
    assert inside, "no listener is advertised under the kafka service's name"
    for name in APP_SERVICES:
        for server in env(services[name])["GPUBILL_KAFKA"].split(","):
            host, port = host_port(server.strip())
            matches = [ln for ln, address in inside.items() if address == (host, port)]
            assert matches, f"{name}: {server} is not advertised by the kafka service ({advertised})"
            listener = matches[0]
            assert listen[listener][1] == port, f"{name}: the broker listens for {listener} on {listen[listener][1]}"
            assert protocols[listener] == "PLAINTEXT", "gpubill speaks PLAINTEXT to Kafka"


# ------------------------------------------------------------------------------ ClickHouse


def test_app_dsns_point_at_the_clickhouse_service(services: dict) -> None:
    ch = services["clickhouse"]
    chenv = env(ch)
    assert chenv["CLICKHOUSE_DB"] == "gpubill"
    for name in APP_SERVICES:
        dsn = urlsplit(env(services[name])["GPUBILL_CLICKHOUSE"])
        assert dsn.scheme == "http"
        assert dsn.hostname in service_names(services, "clickhouse")
        assert dsn.port == 8123
        assert dsn.path.strip("/") == chenv["CLICKHOUSE_DB"]
        assert unquote(dsn.username or "") == chenv["CLICKHOUSE_USER"]
        assert unquote(dsn.password or "") == chenv["CLICKHOUSE_PASSWORD"]
        # …and the same variable feeds both, so changing it keeps them in step
        assert "${GPUBILL_CH_PASSWORD" in raw_env(services[name])["GPUBILL_CLICKHOUSE"]
        assert raw_env(ch)["CLICKHOUSE_PASSWORD"].startswith("${GPUBILL_CH_PASSWORD")


def test_clickhouse_healthcheck_uses_the_admin_user(services: dict) -> None:
    hc = services["clickhouse"]["healthcheck"]
    test = " ".join(hc["test"]) if isinstance(hc["test"], list) else hc["test"]
    assert "SELECT 1" in test
    # `$$` so the container's shell, not compose, expands the credentials
    assert "$$CLICKHOUSE_USER" in test and "$$CLICKHOUSE_PASSWORD" in test


def _finance_file(services: dict) -> tuple[Path, str]:
    ch = services["clickhouse"]
    for source, target in volume_mounts(ch):
        if target.startswith("/etc/clickhouse-server/users.d/") and source.startswith("./deploy/"):
            return ROOT / source, target
    pytest.fail("clickhouse mounts no users.d file from ./deploy/")


def test_finance_user_file_exists_and_is_read_only(services: dict) -> None:
    path, target = _finance_file(services)
    assert path.is_file(), f"{path} (mounted at {target}) is missing"
    assert target.endswith(".xml") and path.suffix == ".xml"
    root = ET.parse(path).getroot()
    assert root.tag == "clickhouse"
    user = root.find("users/finance")
    assert user is not None, "no <users><finance> in the finance user file"
    profile_name = user.findtext("profile")
    profile = root.find(f"profiles/{profile_name}")
    assert profile is not None, f"profile {profile_name} is not defined in the same file"
    assert profile.findtext("readonly") == "1"
    assert (user.findtext("access_management") or "0") == "0"
    grants = [q.text.strip() for q in user.findall("grants/query")]
    assert grants == ["GRANT SELECT ON gpubill.*"], grants
    # the password comes from the container's environment, which compose fills in
    password = user.find("password")
    assert password is not None and password.get("from_env")
    assert password.get("from_env") in env(services["clickhouse"])
    assert "${GPUBILL_FINANCE_PASSWORD" in raw_env(services["clickhouse"])[password.get("from_env")]


# ------------------------------------------------------------------------------ workers


def test_workers_scale_out_in_one_consumer_group(services: dict) -> None:
    worker = services["worker"]
    replicas = (worker.get("deploy") or {}).get("replicas", 1)
    assert 2 <= replicas <= TOPIC_PARTITIONS
    assert "container_name" not in worker, "a fixed container_name prevents replicas"
    # same env for every gpubill process; the group ties the workers together
    assert env(services["worker"]) == env(services["scheduler"])
    assert env(worker)["GPUBILL_GROUP"]


def test_worker_metrics_port_is_exposed(services: dict) -> None:
    worker = services["worker"]
    port = int(env(worker).get("GPUBILL_METRICS_PORT", "9464"))
    assert port in published_targets(worker)
    for item in worker.get("ports") or []:
        # a fixed host port would collide between replicas
        assert isinstance(item, dict) or str(item).count(":") == 0, f"fixed host port {item} breaks replicas"


# ------------------------------------------------------------------------------ image


def test_dockerfile_installs_the_project_as_non_root_with_gpubill_entrypoint() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    stages = [ln for ln in lines if ln.startswith("FROM ")]
    assert stages[-1] == "FROM python:3.11-slim"  # the image; a Rust stage before it builds native/
    assert re.search(r"pip install (/src|\.)\b", text)
    # the native wheel is built from native/ and installed into the image
    assert any(ln.startswith("FROM rust:") and ln.endswith(" AS native") for ln in stages[:-1])
    assert "COPY native /native" in lines and "COPY --from=native /wheels /wheels" in lines
    assert re.search(r"pip install /src /wheels/\*\.whl", text)
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
