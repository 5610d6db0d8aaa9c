#!/usr/bin/env bash
# The compose `kafka-init` service (one-shot, as the super user `admin`): creates the
# pipeline's topics and the ACLs of acls.txt. Idempotent: run it again after editing
# acls.txt (`docker compose run --rm kafka-init`); it adds, it never removes.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${KAFKA_BIN:-/opt/kafka/bin}"
umask 077
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
cat > "$config" <<PROPERTIES
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="${KAFKA_ADMIN_PASSWORD:?}";
PROPERTIES

# schemas/topics.py: PIPELINE_TOPICS (tests/unit/test_compose.py keeps this list in step).
for topic in gpu.usage.v1 gpu.power.v1 gpu.deadletter.v1; do
    "$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
        --create --if-not-exists --topic "$topic" --partitions "${KAFKA_PARTITIONS:-8}" --replication-factor 1
done

# The log of corrections (schemas/topics.py TOPIC_CORRECTIONS), kept for ever.
"$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
    --create --if-not-exists --topic gpu.corrections.v1 --partitions "${KAFKA_PARTITIONS:-8}" --replication-factor 1 \
    --config retention.ms=-1

# The books (schemas/topics.py TOPIC_BOOKS, streams/kafka/books.py BOOKS_TOPIC_CONFIG): every
# money fact, one partition (one order), kept for ever. Replication 3 on a production cluster.
"$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
    --create --if-not-exists --topic gpu.books.v1 --partitions 1 --replication-factor "${KAFKA_BOOKS_REPLICATION:-1}" \
    --config retention.ms=-1 --config retention.bytes=-1

# Live spend (schemas/topics.py spend_topic of GPUBILL_GROUP, compacted: each round replaces
# the one before it under its key) and the billing events it emits, configured as
# streams/kafka/admin.py SPEND_TOPIC_CONFIG and EVENTS_TOPIC_CONFIG (400 days).
"$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
    --create --if-not-exists --topic gpubill-rating.spend.v2 --partitions "${KAFKA_PARTITIONS:-8}" --replication-factor 1 \
    --config cleanup.policy=compact --config segment.ms=600000 --config min.cleanable.dirty.ratio=0.1
# The spend tracker's table (schemas/topics.py spend_changelog_topic), compacted the same way.
"$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
    --create --if-not-exists --topic gpubill-rating.spend-spend_rounds-changelog --partitions "${KAFKA_PARTITIONS:-8}" \
    --replication-factor 1 --config cleanup.policy=compact --config segment.ms=600000 --config min.cleanable.dirty.ratio=0.1
"$bin/kafka-topics.sh" --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$config" \
    --create --if-not-exists --topic gpu.billing-events.v1 --partitions "${KAFKA_PARTITIONS:-8}" --replication-factor 1 \
    --config retention.ms=34560000000

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
