#!/usr/bin/env bash
# A compose Kafka service (kafka-1, kafka-2, kafka-3): one node of a three-node KRaft cluster,
# each node both broker and controller, with SASL/SCRAM and ACLs.
#
# 1. Checks that every password is set and safe to put in a JAAS line (no quotes).
# 2. Writes server.properties and the healthcheck's client.properties into a private
#    directory (umask 077): they hold the broker's own passwords, never a command line.
# 3. Formats the data volume once, creating the SCRAM users (broker, admin, worker,
#    node-agent) in the metadata log: the only way they exist before the first start.
# 4. Starts the broker with the client users' passwords removed from its environment.
#
# The node id, listeners, advertised addresses and the quorum come from compose.yaml (KAFKA_*).
# Every node is formatted with the same cluster id and the same SCRAM users, so whichever
# controller is elected first writes the same users into the metadata log.
set -euo pipefail

conf_dir="${KAFKA_CONF_DIR:-/tmp/gpubill-kafka}"  # the healthcheck reads client.properties here
data_dir="${KAFKA_DATA_DIR:-/var/lib/kafka/data}"
kafka_bin="${KAFKA_BIN:-/opt/kafka/bin}"  # all three overridable for a smoke test outside the image

for name in KAFKA_BROKER_PASSWORD KAFKA_CONTROLLER_PASSWORD KAFKA_ADMIN_PASSWORD \
            KAFKA_WORKER_PASSWORD KAFKA_NODE_AGENT_PASSWORD; do
    value="${!name:-}"
    if [[ ! "$value" =~ ^[A-Za-z0-9_.~+/@%:^!*-]{16,200}$ ]]; then
        echo "start.sh: $name must be 16-200 characters of letters, digits and _.~+/@%:^!*- (e.g. openssl rand -hex 24)" >&2
        exit 2
    fi
done
if [[ ! "${KAFKA_NODE_ID:-}" =~ ^[1-9][0-9]*$ || ",${KAFKA_CONTROLLER_QUORUM_VOTERS:-}" != *",${KAFKA_NODE_ID}@"* ]]; then
    echo "start.sh: KAFKA_NODE_ID must be a positive number named in KAFKA_CONTROLLER_QUORUM_VOTERS (id@host:port,...)" >&2
    exit 2
fi

umask 077
mkdir -p "$conf_dir"
scram="org.apache.kafka.common.security.scram.ScramLoginModule required"
plain="org.apache.kafka.common.security.plain.PlainLoginModule required"

cat > "$conf_dir/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=${KAFKA_NODE_ID}
controller.quorum.voters=${KAFKA_CONTROLLER_QUORUM_VOTERS}
listeners=${KAFKA_LISTENERS}
advertised.listeners=${KAFKA_ADVERTISED_LISTENERS}
listener.security.protocol.map=${KAFKA_LISTENER_SECURITY_PROTOCOL_MAP}
controller.listener.names=CONTROLLER
inter.broker.listener.name=INTERNAL
log.dirs=${data_dir}
# Clients: SCRAM. The broker logs in to itself as the super user broker.
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.internal.scram-sha-512.sasl.jaas.config=${scram} username="broker" password="${KAFKA_BROKER_PASSWORD}";
listener.name.internal.scram-sha-256.sasl.jaas.config=${scram};
listener.name.host.scram-sha-512.sasl.jaas.config=${scram};
listener.name.host.scram-sha-256.sasl.jaas.config=${scram};
# The controller: PLAIN (SCRAM credentials live in the metadata log the controller serves).
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config=${plain} username="controller" password="${KAFKA_CONTROLLER_PASSWORD}" user_controller="${KAFKA_CONTROLLER_PASSWORD}";
# What no ACL allows is refused (deploy/kafka/acls.txt, applied by kafka-init).
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:broker;User:controller;User:admin
allow.everyone.if.no.acl.found=false
# Three nodes: every partition (the internal topics' and, by default, every other) has three
# replicas, and a write with acks=all is acknowledged once two of them have it, so one node
# may be down without losing an acknowledged record or refusing writes. Never elect a leader
# that is not in sync (it would drop acknowledged records).
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
# How long a silent broker keeps its leaderships (the stall when one dies; docs/deployment.md):
# Kafka's defaults unless the environment shortens them.
broker.session.timeout.ms=${KAFKA_BROKER_SESSION_TIMEOUT_MS:-9000}
broker.heartbeat.interval.ms=${KAFKA_BROKER_HEARTBEAT_INTERVAL_MS:-2000}
group.initial.rebalance.delay.ms=0
num.partitions=8
# Only kafka-init (admin) creates topics.
auto.create.topics.enable=false
# The readings topics are the source of truth (replays rebuild everything): keep them.
log.retention.ms=-1
PROPERTIES

cat > "$conf_dir/client.properties" <<PROPERTIES
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=${scram} username="broker" password="${KAFKA_BROKER_PASSWORD}";
PROPERTIES

if [[ ! -f "$data_dir/meta.properties" ]]; then
    "$kafka_bin/kafka-storage.sh" format --cluster-id "$CLUSTER_ID" --config "$conf_dir/server.properties" \
        --add-scram "SCRAM-SHA-512=[name=broker,password=${KAFKA_BROKER_PASSWORD}]" \
        --add-scram "SCRAM-SHA-512=[name=admin,password=${KAFKA_ADMIN_PASSWORD}]" \
        --add-scram "SCRAM-SHA-512=[name=worker,password=${KAFKA_WORKER_PASSWORD}]" \
        --add-scram "SCRAM-SHA-512=[name=node-agent,password=${KAFKA_NODE_AGENT_PASSWORD}]"
fi

exec env -u KAFKA_ADMIN_PASSWORD -u KAFKA_WORKER_PASSWORD -u KAFKA_NODE_AGENT_PASSWORD \
    -u KAFKA_BROKER_PASSWORD -u KAFKA_CONTROLLER_PASSWORD \
    "$kafka_bin/kafka-server-start.sh" "$conf_dir/server.properties"
