"""The Kafka topics of the pipeline and the headers a dead letter carries. Names only.

Topic names are versioned (`.v1`): a change to an event's shape gets a new topic, so that
old and new producers never share one. Both reading topics are keyed by `gpu_uuid` and
have the same partition count (a card's usage and power meet in one worker).

A dead letter on `gpu.deadletter.v1` is the refused message byte for byte (cut to
`MAX_DEADLETTER_VALUE` bytes if larger, the cut named in `H_TRUNCATED`), with headers that
say why and where it came from.
"""

from __future__ import annotations

TOPIC_USAGE = "gpu.usage.v1"
TOPIC_POWER = "gpu.power.v1"
TOPIC_DEADLETTER = "gpu.deadletter.v1"
TOPIC_BILLING_EVENTS = "gpu.billing-events.v1"  # keyed by tenant; schemas/billing_events.py (issue 15)
TOPIC_CORRECTIONS = "gpu.corrections.v1"  # keyed by gpu_uuid, kept for ever; schemas/corrections.py (issue 25)
TOPIC_BOOKS = "gpu.books.v1"  # every money fact, kept for ever, one partition; schemas/books.py (issue 37)
READING_TOPICS = {"usage": TOPIC_USAGE, "power": TOPIC_POWER}  # event kind → its topic
KIND_OF_TOPIC = {TOPIC_USAGE: "usage", TOPIC_POWER: "power"}  # topic → the event kind it carries
PIPELINE_TOPICS = (TOPIC_USAGE, TOPIC_POWER, TOPIC_DEADLETTER)  # what a worker consumes



def spend_topic(group: str) -> str:
    """The compacted spend topic of the rating group `group` (schemas/spend.py, issue 15): its
    records are what that group's workers rated into that group's database, so a second
    pipeline on the same brokers (a bench, a rebuild) keeps its own."""
    return f"{group}.spend.v2"


def spend_changelog_topic(group: str) -> str:
    """The compacted changelog of the spend tracker's table (streams/spend/table.py): each round
    key's latest round, the tracker's durable state. The name is the one Faust gave it when
    the table was Faust's, so a tracker upgraded in place recovers what its predecessor kept."""
    return f"{group}.spend-spend_rounds-changelog"


# Kafka headers on a dead letter.
H_REASON = "gpubill-reason"
H_TOPIC = "gpubill-source-topic"
H_PARTITION = "gpubill-source-partition"
H_OFFSET = "gpubill-source-offset"
H_LINE = "gpubill-source-line"
H_INDEX = "gpubill-source-index"
H_TRUNCATED = "gpubill-truncated-from"  # the original was larger than a Kafka record may be
MAX_DEADLETTER_VALUE = 512 * 1024  # bytes of the original kept in the Kafka record (ClickHouse keeps all)


def replication_for(brokers: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) of the topics of a cluster of `brokers`:
    three copies where there are three brokers or more, and each write on two of them before
    it is acknowledged (the producers' acks=all), so that any one broker may be lost at any
    moment and nothing acknowledged with it; fewer brokers keep a copy on each and take a
    write on one (a development broker, or a cluster too small to lose one)."""
    replication = min(3, max(1, brokers))
    return replication, (2 if replication >= 3 else 1)
