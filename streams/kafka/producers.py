"""Readings into Kafka: `replay` an NDJSON file exactly as written, or `simulate` a fleet.

Both key each message by `gpu_uuid` so a card's readings stay in one partition, in order,
and route by `kind` (usage → gpu.usage.v1, power → gpu.power.v1).

`replay_file` never stops on a line: a line it cannot route (not JSON, no readable kind),
key (a `gpu_uuid`/`node` that cannot be encoded, e.g. a lone surrogate `"\ud800"`) or
produce (too large, refused by the client) is dead-lettered by replay itself with its line
number and reason, and the rest of the file is produced. Only a broker that stops
answering stops it (`KafkaUnreachable`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import orjson
from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from schemas.topics import READING_TOPICS, TOPIC_DEADLETTER
from streams.deadletters import DeadLetter
from streams.errors import InputFileError, KafkaUnreachable
from streams.kafka.message import Message
from streams.kafka.settings import TIMEOUT_MS, KafkaSettings, client_options

Progress = Callable[[int], None]
MAX_MESSAGE_BYTES = 1_000_000  # the producer's and broker's default limit, less headroom for headers


def make_producer(settings: KafkaSettings) -> KafkaProducer:
    """A producer of readings and corrections that batches for throughput and waits for
    every in-sync replica (acks=all: with min.insync.replicas 2, a record acknowledged is on
    two brokers); idempotent, so that the client's own retries after a leader change add
    no duplicate and keep each partition's order."""
    try:
        return KafkaProducer(
            bootstrap_servers=settings.kafka.split(","),
            acks="all",
            enable_idempotence=True,
            linger_ms=20,
            batch_size=256 * 1024,
            compression_type=None,
            max_block_ms=TIMEOUT_MS,
            request_timeout_ms=TIMEOUT_MS,
            bootstrap_timeout_ms=TIMEOUT_MS,
            **client_options(settings, client="kafka-python"),
        )
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc


def flush_producer(producer: KafkaProducer, settings: KafkaSettings, timeout_s: float = 60.0) -> None:
    try:
        producer.flush(timeout=timeout_s)
    except KafkaError as exc:
        raise KafkaUnreachable(settings.kafka, f"messages not acknowledged: {exc}") from exc


@dataclass
class ProduceReport:
    produced: dict[str, int]
    deadlettered: int = 0
    skipped_blank: int = 0
    refused: list[tuple[int, str]] = field(default_factory=list)  # (line, reason) of the dead-lettered lines

    @property
    def total(self) -> int:
        return sum(self.produced.values())


def classify_line(line: bytes) -> tuple[str | None, bytes | None, str]:
    """(topic, key, reason) for one NDJSON line; topic None means: dead-letter with reason.

    A line may be one reading or a JSON array of readings. Only `kind` and the key field are read here; everything else is the worker's to judge, so
    bad readings with a readable kind travel to the pipeline's dead-letter path unchanged.
    """
    try:
        document = json.loads(line)
    except (UnicodeDecodeError, ValueError) as exc:
        return None, None, f"kind: cannot be read, the line is not JSON ({exc.__class__.__name__})"
    except RecursionError:
        return None, None, "kind: cannot be read, the line is JSON nested too deeply"
    key_field = "gpu_uuid"
    if isinstance(document, list):
        # A batch (a node agent's cards in one message) goes where its first reading goes,
        # keyed by node so that a node's batches stay in order; each element is judged alone.
        if not document or not isinstance(document[0], dict):
            return None, None, "kind: cannot be read, the batch has no JSON object first"
        document, key_field = document[0], "node"
    if not isinstance(document, dict):
        return None, None, "kind: cannot be read, the line is not a JSON object"
    topic = READING_TOPICS.get(document.get("kind")) if isinstance(document.get("kind"), str) else None
    if topic is None:
        return None, None, f"kind: must be 'usage' or 'power', got {document.get('kind')!r}"
    key = document.get(key_field)
    if not isinstance(key, str):
        return topic, None, ""  # the worker refuses the reading with its reason
    try:
        return topic, key.encode("utf-8"), ""
    except UnicodeEncodeError:  # a lone surrogate ("\ud800" in the JSON text) has no UTF-8
        return None, None, f"{key_field}: cannot be encoded as the Kafka key (not valid Unicode: {ascii(key)[:80]})"


def replay_file(settings: KafkaSettings, path: Path, progress: Progress | None = None,
                producer: Any = None) -> ProduceReport:
    """Produce every line of `path` to Kafka; a line that cannot be routed, keyed or produced
    is dead-lettered here (see the module docstring). `producer` is the seam for tests
    (anything with KafkaProducer's send/flush/close); by default a real one."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    report = ProduceReport(produced={})
    producer = producer if producer is not None else make_producer(settings)
    # The path goes into a header: a name that is not UTF-8 must not stop the replay either.
    source = "replay:" + str(path).encode("utf-8", "backslashreplace").decode("utf-8")
    with handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                report.skipped_blank += 1
                continue
            topic, key, reason = classify_line(line)
            if topic is not None and len(line) > MAX_MESSAGE_BYTES:
                topic, reason = None, f"the line has {len(line):,} bytes, more than a Kafka message may ({MAX_MESSAGE_BYTES:,})"
            if topic is not None:
                reason = _send(producer, settings, topic, key, line)
            if reason:
                _deadletter(producer, settings, source, number, line, reason)
                report.deadlettered += 1
                report.refused.append((number, reason))
            else:
                report.produced[topic] = report.produced.get(topic, 0) + 1
            if progress:
                progress(len(raw))
    flush_producer(producer, settings)
    producer.close()
    return report


def _send(producer: Any, settings: KafkaSettings, topic: str, key: bytes | None, line: bytes) -> str:
    """Produce one line; "" when sent, else why the client refused it (the line's fault)."""
    try:
        producer.send(topic, key=key, value=line)
    except KafkaTimeoutError as exc:  # no metadata within max_block_ms: the broker, not the line
        raise KafkaUnreachable(settings.kafka, str(exc)) from exc
    except (KafkaError, ValueError, TypeError, AssertionError) as exc:  # kafka-python asserts on types
        return f"cannot be produced: {exc.__class__.__name__}: {' '.join(str(exc).split())[:200]}"
    return ""


def _deadletter(producer: Any, settings: KafkaSettings, source: str, number: int, line: bytes, reason: str) -> None:
    letter = DeadLetter(Message(source, -1, -1, None, line), f"line {number}: {reason}", line=number)
    value, headers = letter.record()
    try:
        producer.send(TOPIC_DEADLETTER, value=value, headers=headers)
    except KafkaError as exc:  # the dead-letter topic must take it: otherwise the line would be lost
        raise KafkaUnreachable(settings.kafka, f"cannot dead-letter line {number}: {exc}") from exc


def produce_readings(settings: KafkaSettings, readings: Iterable[dict], progress: Progress | None = None) -> ProduceReport:
    """Produce reading dicts (e.g. from `gpubill.devenv.simulator`) as JSON, keyed by gpu_uuid."""
    report = ProduceReport(produced={})
    producer = make_producer(settings)
    for count, reading in enumerate(readings, start=1):
        topic = READING_TOPICS[reading["kind"]]
        producer.send(topic, key=reading["gpu_uuid"].encode(), value=orjson.dumps(reading))
        report.produced[topic] = report.produced.get(topic, 0) + 1
        if progress and count % 1000 == 0:
            progress(1000)
    flush_producer(producer, settings)
    producer.close()
    return report
