#!/usr/bin/env bash
# The compose `kafka-init` service (one-shot, as the super user `admin`): creates the
# pipeline's topics and the ACLs of acls.txt. Idempotent: run it again after editing
# acls.txt (`docker compose run --rm kafka-init`); it adds, it never removes.
#
# Every topic gets KAFKA_REPLICATION replicas (3: one per broker), min.insync.replicas
# KAFKA_MIN_INSYNC (2: an acks=all write is acknowledged by two brokers, so one may be down)
# and no unclean leader election (an out-of-sync replica never becomes leader and drops
# acknowledged records). A topic that already exists is left as it is (--if-not-exists):
# change its replicas with kafka-reassign-partitions.sh, its configs with kafka-configs.sh.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${KAFKA_BIN:-/opt/kafka/bin}"
replication="${KAFKA_REPLICATION:-3}"
min_insync="${KAFKA_MIN_INSYNC:-2}"
if [[ ! "$replication" =~ ^[1-9]$ || ! "$min_insync" =~ ^[1-9]$ ]] || (( min_insync > replication )); then
    echo "init.sh: KAFKA_REPLICATION ($replication) and KAFKA_MIN_INSYNC ($min_insync) must be 1-9, min in sync at most the replicas (3 and 2 on three brokers)" >&2
    exit 2
fi
umask 077
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
cat > "$config" <<PROPERTIES
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="${KAFKA_ADMIN_PASSWORD:?}";
PROPERTIES

# create_topic NAME PARTITIONS [--config KEY=VALUE ...]: with the replication above, then the
# topic's own configs.
create_topic() {
    local topic="$1" partitions="$2"
    shift 2
    "$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
        --create --if-not-exists --topic "$topic" --partitions "$partitions" \
        --replication-factor "$replication" --config "min.insync.replicas=$min_insync" \
        --config unclean.leader.election.enable=false "$@"
}

# schemas/topics.py: PIPELINE_TOPICS (tests/unit/test_compose.py keeps this list in step).
for topic in gpu.usage.v1 gpu.power.v1 gpu.deadletter.v1; do
    create_topic "$topic" "${KAFKA_PARTITIONS:-8}"
done

# The log of corrections (schemas/topics.py TOPIC_CORRECTIONS), kept for ever.
create_topic gpu.corrections.v1 "${KAFKA_PARTITIONS:-8}" --config retention.ms=-1

# The books (schemas/topics.py TOPIC_BOOKS, streams/kafka/books.py BOOKS_TOPIC_CONFIG): every
# money fact, one partition (one order), kept for ever.
create_topic gpu.books.v1 1 --config retention.ms=-1 --config retention.bytes=-1 --config cleanup.policy=delete

# Live spend (schemas/topics.py spend_topic of GPUBILL_GROUP, compacted: each round replaces
# the one before it under its key) and the billing events it emits, configured as
# streams/kafka/admin.py SPEND_TOPIC_CONFIG and EVENTS_TOPIC_CONFIG (400 days).
create_topic gpubill-rating.spend.v2 "${KAFKA_PARTITIONS:-8}" \
    --config cleanup.policy=compact --config segment.ms=600000 --config min.cleanable.dirty.ratio=0.1
# The spend tracker's table (schemas/topics.py spend_changelog_topic), compacted the same way.
create_topic gpubill-rating.spend-spend_rounds-changelog "${KAFKA_PARTITIONS:-8}" \
    --config cleanup.policy=compact --config segment.ms=600000 --config min.cleanable.dirty.ratio=0.1
create_topic gpu.billing-events.v1 "${KAFKA_PARTITIONS:-8}" --config retention.ms=34560000000

while read -r principal operation resource pattern name; do
    [[ -z "${principal:-}" || "$principal" == \#* ]] && continue
    case "$resource" in
        topic) target=(--topic "$name") ;;
        group) target=(--group "$name") ;;
        cluster) target=(--cluster) ;;
        transactional-id) target=(--transactional-id "$name") ;;
        *) echo "init.sh: unknown resource $resource in acls.txt" >&2; exit 2 ;;
    esac
    "$bin/kafka-acls.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" --add \
        --allow-principal "User:$principal" --operation "$operation" --resource-pattern-type "$pattern" \
        "${target[@]}" > /dev/null
    echo "allowed User:$principal $operation on $resource $pattern $name"
done < "$here/acls.txt"
