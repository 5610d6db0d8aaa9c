"""Kafka administration: the pipeline's topics, the group's offsets, the end offsets of a drain.

kafka-python errors are translated here into `KafkaUnreachable` with what to do; every
call is bounded in time so that an unreachable broker is a clear error, never a hang.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Iterable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from schemas.topics import PIPELINE_TOPICS, TOPIC_BILLING_EVENTS, replication_for, spend_changelog_topic, spend_topic
from streams.errors import KafkaUnreachable, TopicsNotCreated
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options, consumer_options


def ensure_pipeline_topics(settings: KafkaSettings) -> None:
    """Create the readings and dead-letter topics when missing (replication 1 locally)."""
    ensure_topics(settings.kafka, {topic: settings.partitions for topic in PIPELINE_TOPICS},
                  options=client_options(settings, client="kafka-python"))


# The spend topic holds one cumulative round per (source partition, spend partition), the
# tracker's changelog the latest of each: compacted, they stay small, and a segment rolls
# every ten minutes so that compaction can work on them.
# Billing events are rare and kept for a year and more: they are what consumers and the
# tracker deduplicate against.
SPEND_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1"}
EVENTS_TOPIC_CONFIG = {"retention.ms": str(400 * 24 * 3600 * 1000)}


def ensure_spend_topics(settings: KafkaSettings) -> None:
    """Create <group>.spend.v2 and the tracker's changelog (both compacted) and
    gpu.billing-events.v1 when missing, with the readings topics' partition count (the
    tracker's table is co-partitioned with them)."""
    spend, changelog = spend_topic(settings.group), spend_changelog_topic(settings.group)
    topics = (spend, changelog, TOPIC_BILLING_EVENTS)
    counts = ensure_topics(settings.kafka, dict.fromkeys(topics, settings.partitions),
                           options=client_options(settings, client="kafka-python"),
                           configs={spend: SPEND_TOPIC_CONFIG, changelog: SPEND_TOPIC_CONFIG,
                                    TOPIC_BILLING_EVENTS: EVENTS_TOPIC_CONFIG})
    for topic in topics:
        if counts.get(topic) != settings.partitions:
            raise TopicsNotCreated(
                f"{topic} has {counts.get(topic, 0)} partitions and GPUBILL_PARTITIONS is {settings.partitions}: live "
                "spend places each tenant by that count; set GPUBILL_PARTITIONS to the topics' count")


def group_offsets(settings: KafkaSettings, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) → (the group's committed offset, end offset) for every partition."""
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=settings.kafka.split(","),
            group_id=settings.group,
            enable_auto_commit=False,
            request_timeout_ms=TIMEOUT_MS + 1000,
            bootstrap_timeout_ms=TIMEOUT_MS,
            # Read committed, the end offsets are the last stable offsets: a drain's targets
            # stop before a transaction still open (it could never read past one).
            **consumer_options(settings, client="kafka-python"),
        )
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    try:
        partitions = []
        for topic in topics:
            ids = consumer.partitions_for_topic(topic) or set()
            partitions += [TopicPartition(topic, p) for p in sorted(ids)]
        ends = consumer.end_offsets(partitions) if partitions else {}
        return {(tp.topic, tp.partition): (consumer.committed(tp) or 0, ends[tp]) for tp in partitions}
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    finally:
        consumer.close()


def drain_targets(settings: KafkaSettings, topics: Iterable[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) → (committed offset, end offset), for partitions where the group is behind."""
    return {tp: (committed, end) for tp, (committed, end) in group_offsets(settings, topics).items() if end > committed}


def nothing_listens(bootstrap: str, timeout_s: float = 2.0) -> bool:
    """True when every address of every bootstrap server refuses a TCP connection: nothing
    listens there, which is definite (the clients would retry it for TIMEOUT_MS and more). False
    when any address connects, or when it cannot be told — a timeout, a name that does not
    resolve: a slow or distant broker is left to the clients' own time bounds."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            addresses = socket.getaddrinfo(host.strip("[]") or "localhost", int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            return False
        for family, kind, proto, _, address in addresses:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(timeout_s)
                try:
                    probe.connect(address)
                except ConnectionRefusedError:
                    continue
                except OSError:
                    return False
                return False
    return True


def ensure_topics(bootstrap: str, topics: dict[str, int], timeout_s: float = 15.0, *,
                  options: dict | None = None, configs: dict[str, dict[str, str]] | None = None) -> dict[str, int]:
    """Create the topics that do not exist yet ({name: partitions}), replicated for the cluster.

    A topic is created with `topic_replication` of the brokers the cluster has: three
    replicas and `min.insync.replicas` 2 where there are three brokers or more (with the
    producers' acks=all, an acknowledged record is on two brokers: any one may be lost),
    one each on a single development broker; an unclean leader election, which would let
    a replica that missed acknowledged records lead, is refused either way. Existing topics
    are left as they are, whatever their partition count or replication. Returns each
    one's partition count once every topic is visible in the cluster metadata; raises
    KafkaUnreachable when no broker answers within `timeout_s`. `options`: the client's
    security (`client_options`); `configs`: topic configs of the topics created here
    ({name: {key: value}}).
    """
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    deadline = time.monotonic() + timeout_s
    timeout_ms = int(timeout_s * 1000)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="gpubill-admin",
            request_timeout_ms=timeout_ms,
            bootstrap_timeout_ms=timeout_ms,
            **(options or {}),
        )
    except KafkaError as exc:
        raise KafkaUnreachable(bootstrap, type(exc).__name__) from exc
    try:
        existing = set(admin.list_topics())
        absent = {name: partitions for name, partitions in topics.items() if name not in existing}
        replication, durable = topic_replication(len(admin.describe_cluster()["brokers"])) if absent else (1, {})
        missing = {
            name: {"num_partitions": partitions, "replication_factor": replication,
                   "configs": {**durable, **(configs or {}).get(name, {})}}
            for name, partitions in absent.items()
        }
        if missing:
            result = admin.create_topics(missing, timeout_ms=timeout_ms, raise_errors=False)
            refused = [
                f"{topic['name']}: {topic.get('error_message') or topic['error_code']}"
                for topic in result.get("topics", [])
                if topic["error_code"] not in (0, TopicAlreadyExistsError.errno)  # a racing creator is fine
            ]
            if refused:
                raise TopicsNotCreated(f"Kafka at {bootstrap} refused to create topics ({'; '.join(refused)})")
        while True:
            absent = sorted(set(topics) - set(admin.list_topics()))
            if not absent:
                counts = _partition_counts(admin, sorted(topics))
                # On a cluster a broker may list a topic just made before it knows its partitions:
                # none is not a count, it is "not yet".
                absent = [topic for topic, count in counts.items() if count == 0]
                if not absent:
                    return counts
            if time.monotonic() >= deadline:
                raise TopicsNotCreated(
                    f"topics {', '.join(absent)} did not appear at {bootstrap} within {timeout_s:.0f} s"
                )
            time.sleep(0.2)
    except KafkaError as exc:
        raise KafkaUnreachable(bootstrap, f"{type(exc).__name__}: {exc}") from exc
    finally:
        with contextlib.suppress(Exception):
            admin.close()


def topic_replication(brokers: int) -> tuple[int, dict[str, str]]:
    """(replication factor, topic configs) of a topic gpubill creates on a cluster of
    `brokers` (`schemas.topics.replication_for`), unclean leader election off."""
    replication, min_insync = replication_for(brokers)
    return replication, {"min.insync.replicas": str(min_insync), "unclean.leader.election.enable": "false"}


def _partition_counts(admin, topics: list[str]) -> dict[str, int]:
    """{topic: partition count} from the admin client's metadata (kafka-python ≥ 3.0, as
    pyproject.toml pins it, names a topic `name`)."""
    return {described["name"]: len(described["partitions"]) for described in admin.describe_topics(topics)}
