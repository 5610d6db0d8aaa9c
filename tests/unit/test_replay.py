"""`replay_file` (streams/kafka/producers.py) through its producer seam: no line stops it.

Every line that cannot be routed, keyed or produced is dead-lettered by replay itself with
its line number and reason; every other line is produced exactly as written, in order.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.errors import KafkaTimeoutError, MessageSizeTooLargeError

from schemas.topics import (
    H_LINE,
    H_REASON,
    H_TOPIC,
    TOPIC_DEADLETTER,
    TOPIC_POWER,
    TOPIC_USAGE,
)
from streams.errors import KafkaUnreachable
from streams.kafka.producers import replay_file

SETTINGS = SimpleNamespace(kafka="127.0.0.1:1", group="g", partitions=1)
POWER = '{"kind":"power","event_id":"p-%d","ts":"2026-03-01T00:00:05Z","site":"gz-guian","node":"n1","gpu_uuid":%s,"power_w":300}'


class FakeProducer:
    """KafkaProducer's send/flush/close; `refuse` maps a reading's value to the exception its
    send raises (the dead letter of it, cut to 512 KiB, goes through)."""

    def __init__(self, refuse: dict[bytes, Exception] | None = None) -> None:
        self.sent: list[tuple[str, bytes | None, bytes, dict[str, bytes]]] = []
        self.refuse = refuse or {}
        self.flushed = self.closed = False

    def send(self, topic: str, key: bytes | None = None, value: bytes = b"", headers: list | None = None) -> None:
        if value in self.refuse and topic != TOPIC_DEADLETTER:
            raise self.refuse[value]
        assert key is None or isinstance(key, bytes)  # what kafka-python asserts
        self.sent.append((topic, key, value, dict(headers or [])))

    def flush(self, timeout: float | None = None) -> None:
        self.flushed = True

    def close(self) -> None:
        self.closed = True


def replay(tmp_path: Path, lines: list[bytes], producer: FakeProducer | None = None):
    path = tmp_path / "readings.ndjson"
    path.write_bytes(b"\n".join(lines) + b"\n")
    producer = producer or FakeProducer()
    return replay_file(SETTINGS, path, producer=producer), producer


def power(n: int, gpu_json: str = '"GPU-1"') -> bytes:
    return (POWER % (n, gpu_json)).encode()


def test_a_lone_surrogate_key_is_dead_lettered_and_the_rest_is_produced(tmp_path) -> None:
    lines = [power(1), power(2, '"\\ud800"'), power(3), b'[' + power(4, '"GPU-2"').replace(b'"node":"n1"', b'"node":"\\udfff"') + b']',
             power(5)]
    report, producer = replay(tmp_path, lines)
    readings = [(topic, key, value) for topic, key, value, _ in producer.sent if topic != TOPIC_DEADLETTER]
    assert readings == [(TOPIC_POWER, b"GPU-1", lines[0]), (TOPIC_POWER, b"GPU-1", lines[2]),
                        (TOPIC_POWER, b"GPU-1", lines[4])]
    letters = [(value, headers) for topic, _, value, headers in producer.sent if topic == TOPIC_DEADLETTER]
    assert [value for value, _ in letters] == [lines[1], lines[3]]  # the original bytes
    assert [headers[H_LINE] for _, headers in letters] == [b"2", b"4"]
    reasons = [headers[H_REASON].decode() for _, headers in letters]
    assert reasons[0].startswith("line 2: gpu_uuid: cannot be encoded as the Kafka key"), reasons
    assert reasons[1].startswith("line 4: node: cannot be encoded as the Kafka key"), reasons
    assert "\\ud800" in reasons[0]
    assert (report.total, report.deadlettered, [n for n, _ in report.refused]) == (3, 2, [2, 4])
    assert producer.flushed and producer.closed


@pytest.mark.parametrize(("line", "fragment"), [
    (b"not json", "not JSON"),
    (b'{"kind": "usage", "event_id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deeply"),
    (b"\xff\xfe{}", "not JSON"),
    (b"[]", "the batch has no JSON object first"),
    (b'{"kind": "energy"}', "kind: must be 'usage' or 'power'"),
    (b'{"kind": "\\ud800"}', "kind: must be 'usage' or 'power'"),
    (b"42", "not a JSON object"),
])
def test_lines_without_a_readable_kind_are_dead_lettered_with_their_number(tmp_path, line, fragment) -> None:
    report, producer = replay(tmp_path, [power(1), line, power(2)])
    assert [topic for topic, *_ in producer.sent] == [TOPIC_POWER, TOPIC_DEADLETTER, TOPIC_POWER]
    _, _, value, headers = producer.sent[1]
    assert value == line and headers[H_LINE] == b"2"
    assert headers[H_REASON].decode().startswith("line 2: ") and fragment in headers[H_REASON].decode()
    assert (report.total, report.deadlettered) == (2, 1)


def test_a_line_the_client_refuses_is_dead_lettered_and_the_replay_goes_on(tmp_path) -> None:
    producer = FakeProducer(refuse={power(2): MessageSizeTooLargeError("too large for the broker")})
    report, producer = replay(tmp_path, [power(1), power(2), power(3)], producer)
    assert [(topic, value) for topic, _, value, _ in producer.sent] == [
        (TOPIC_POWER, power(1)), (TOPIC_DEADLETTER, power(2)), (TOPIC_POWER, power(3))]
    reason = "cannot be produced: MessageSizeTooLargeError: [Error 10] MessageSizeTooLargeError: too large for the broker"
    assert report.refused == [(2, reason)]


def test_a_broker_that_stops_answering_stops_the_replay_with_a_clear_error(tmp_path) -> None:
    producer = FakeProducer(refuse={power(2): KafkaTimeoutError("no metadata within 10000 ms")})
    with pytest.raises(KafkaUnreachable, match="no Kafka broker answers at 127.0.0.1:1"):
        replay(tmp_path, [power(1), power(2)], producer)


def test_a_file_name_that_is_not_utf8_does_not_stop_the_replay(tmp_path) -> None:
    path = Path(str(tmp_path / "bad-\udcff.ndjson"))
    try:
        path.write_bytes(b"[]\n" + power(1) + b"\n")
    except (OSError, UnicodeEncodeError):
        pytest.skip("the file system refuses the name")
    producer = FakeProducer()
    report = replay_file(SETTINGS, path, producer=producer)
    assert (report.total, report.deadlettered) == (1, 1)
    assert producer.sent[0][3][H_TOPIC].startswith(b"replay:")


def test_usage_goes_to_the_usage_topic_keyed_by_card(tmp_path) -> None:
    line = (b'{"kind":"usage","event_id":"u-1","ts":"2026-03-01T00:00:05Z","site":"gz-guian","node":"n1",'
            b'"gpu_uuid":"GPU-\xc3\xa9","gpu_model":"A800-80G","tenant":null,"instance":null,"util_pct":1,"mem_used_mib":0}')
    report, producer = replay(tmp_path, [line])
    assert producer.sent == [(TOPIC_USAGE, "GPU-é".encode(), line, {})]
    assert report.deadlettered == 0
