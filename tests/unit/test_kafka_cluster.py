"""The local Kafka cluster's layout and configuration, and the replication of the topics gpubill
creates (issue 40). The cluster itself runs in tests/e2e/test_cluster_faults_e2e.py."""

from __future__ import annotations

import json

import pytest

from gpubill.devenv.kafka_cluster import LocalCluster, PartitionHealth, _min_insync
from gpubill.devenv.kafka_config import Quorum, render_server_properties
from schemas.topics import replication_for
from streams.kafka.admin import topic_replication


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("brokers, expected", [(1, (1, 1)), (2, (2, 1)), (3, (3, 2)), (5, (3, 2))])
def test_three_copies_and_two_in_sync_where_there_are_three_brokers(brokers, expected):
    assert replication_for(brokers) == expected


def test_the_topics_gpubill_creates_never_elect_an_unclean_leader():
    assert topic_replication(3) == (3, {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"})
    assert topic_replication(1) == (1, {"min.insync.replicas": "1", "unclean.leader.election.enable": "false"})


def test_a_node_of_three_names_every_voter_and_replicates_its_internal_topics(tmp_path):
    props = _props(render_server_properties(log_dir=tmp_path, port=19093, controller_port=19096,
                                            quorum=Quorum(node_id=2, controller_ports=(19095, 19096, 19097))))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@localhost:19095,2@localhost:19096,3@localhost:19097"
    assert props["listeners"] == "PLAINTEXT://localhost:19093,CONTROLLER://localhost:19096"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "default.replication.factor", "share.coordinator.state.topic.replication.factor"):
        assert props[key] == "3", key
    for key in ("transaction.state.log.min.isr", "min.insync.replicas", "share.coordinator.state.topic.min.isr"):
        assert props[key] == "2", key
    assert props["unclean.leader.election.enable"] == "false"
    assert int(props["broker.session.timeout.ms"]) >= 4 * int(props["broker.heartbeat.interval.ms"])


def test_a_single_node_is_the_development_broker_as_before(tmp_path):
    props = _props(render_server_properties(log_dir=tmp_path, port=19092, controller_port=19093))
    assert (props["node.id"], props["controller.quorum.voters"]) == ("1", "1@localhost:19093")
    assert props["offsets.topic.replication.factor"] == props["min.insync.replicas"] == "1"
    assert "broker.session.timeout.ms" not in props  # Kafka's own default for one node


def test_the_cluster_takes_consecutive_ports_and_a_home_per_node(tmp_path):
    cluster = LocalCluster(tmp_path / "k", 3, 29500)
    assert cluster.bootstrap == "localhost:29500,localhost:29501,localhost:29502"
    assert [(n.port, n.controller_port) for n in cluster.nodes] == [(29500, 29503), (29501, 29504), (29502, 29505)]
    assert [n.home.name for n in cluster.nodes] == ["node-1", "node-2", "node-3"]
    assert len({n.cluster_id for n in cluster.nodes}) == 1  # one cluster id, kept in the home
    assert LocalCluster(tmp_path / "k", 3, 29500).nodes[0].cluster_id == cluster.nodes[0].cluster_id
    single = LocalCluster(tmp_path / "one", 1, 29600)
    assert (single.nodes[0].home, single.nodes[0].controller_port) == ((tmp_path / "one").resolve(), 29601)


def test_a_cluster_is_found_again_by_its_layout_and_nothing_else(tmp_path):
    assert LocalCluster.recorded(tmp_path) is None
    (tmp_path / "cluster.json").write_text(json.dumps({"brokers": 3, "first_port": 29700}))
    found = LocalCluster.recorded(tmp_path)
    assert found is not None and found.bootstrap.startswith("localhost:29700,")
    (tmp_path / "cluster.json").write_text("{not json")
    assert LocalCluster.recorded(tmp_path) is None
    with pytest.raises(ValueError, match="--brokers must be 1 to 9"):
        LocalCluster(tmp_path, 10, 29800)


def test_min_insync_is_read_from_describe_configs_and_health_judged_against_it():
    described = {"topic": {"a": {"min.insync.replicas": {"value": "2"}}, "b": {}}}
    assert _min_insync(described) == {"a": 2}
    short = PartitionHealth("a", 0, leader=2, replicas=(1, 2, 3), isr=(2,), min_insync=2)
    assert short.under_replicated and short.below_min_insync
    lagging = PartitionHealth("a", 1, leader=2, replicas=(1, 2, 3), isr=(2, 3), min_insync=2)
    assert lagging.under_replicated and not lagging.below_min_insync


def _gpubill(tmp_path, *args: str):
    import os
    import subprocess
    import sys

    from tests.ports import free_port_run

    port = free_port_run(2)  # nothing listens there
    env = {**os.environ, "GPUBILL_HOME": str(tmp_path), "GPUBILL_KAFKA": f"localhost:{port}", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "gpubill.cli", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_kafka_status_says_a_node_is_down_and_exits_1(tmp_path):
    done = _gpubill(tmp_path, "kafka", "status", "--json")
    assert done.returncode == 1
    shown = json.loads(done.stdout)
    assert [(n["id"], n["alive"], n["pid"]) for n in shown["nodes"]] == [(1, False, None)]
    assert shown["partitions"] == 0


def test_a_sasl_cluster_is_refused_in_one_line(tmp_path):
    done = _gpubill(tmp_path, "kafka", "up", "--brokers", "3", "--sasl")
    assert done.returncode != 0 and "starts one broker" in done.stderr and len(done.stderr.strip().splitlines()) == 1
