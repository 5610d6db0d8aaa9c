"""process_batch: one batch of Kafka messages → rows, dead letters and positions, without Kafka.

2026-03-01T00:00:00Z = 1 772 323 200 (20 513 days × 86 400 s); NOW is one hour later.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_DEADLETTER, TOPIC_POWER, TOPIC_USAGE
from schemas.tables import RATED_SECONDS
from schemas.topics import H_OFFSET, H_PARTITION, H_REASON, H_TOPIC
from streams.deadletters import DeadLetter, deadletter_row_from_record
from streams.kafka.message import Message
from streams.rating.reference_batch import process_batch
from streams.rating.reference import Rater

RULES = load_rules(DEFAULT_RULES_DIR)
SITES, MODELS = frozenset(RULES.site_ids), frozenset(RULES.model_ids)
T = 1_772_323_200  # 2026-03-01T00:00:00Z
NOW = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)  # T + 3600


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usage_bytes(gpu: str, second: int, event_id: str, tenant: str | None = "acme", **changes: Any) -> bytes:
    doc = {
        "kind": "usage", "event_id": event_id, "ts": iso(second), "site": "gz-guian", "node": "node-01",
        "gpu_uuid": gpu, "gpu_model": "A800-80G", "tenant": tenant, "instance": tenant and f"i-{tenant}",
        "util_pct": 50, "mem_used_mib": 1024, **changes,
    }
    return json.dumps(doc).encode()


def power_bytes(gpu: str, second: int, event_id: str, power_w: Any = 300, **changes: Any) -> bytes:
    doc = {
        "kind": "power", "event_id": event_id, "ts": iso(second), "site": "gz-guian", "node": "node-01",
        "gpu_uuid": gpu, "power_w": power_w, **changes,
    }
    return json.dumps(doc).encode()


def msg(topic: str, partition: int, offset: int, value: bytes | None, key: bytes | None = b"G1") -> Message:
    return Message(topic, partition, offset, key, value)


def run(messages: list[Message], rater: Rater | None = None, lookup=None):
    return process_batch(
        messages, rater or Rater(RULES), known_sites=SITES, known_models=MODELS, now=NOW, lookup=lookup
    )


def rows(result) -> list[dict[str, Any]]:
    return [dict(zip(RATED_SECONDS, r)) for r in result.outcome.rated]


# dead letters -----------------------------------------------------------------------


BAD = [
    # (id, topic, value, reason starts with)
    ("not-json", TOPIC_USAGE, b"\x00\x01garbage", "not JSON"),
    ("not-an-object", TOPIC_POWER, b"42", "a reading must be a JSON object"),
    ("broken-batch", TOPIC_POWER, b'[{"kind": "power"}, ', "not JSON"),
    ("no-value", TOPIC_POWER, None, "empty message"),
    ("usage-on-power-topic", TOPIC_POWER, usage_bytes("G1", T, "u-x"), "kind:"),
    ("power-on-usage-topic", TOPIC_USAGE, power_bytes("G1", T, "p-x"), "kind:"),
    ("unknown-site", TOPIC_POWER, power_bytes("G1", T, "p-x", site="mars-1"), "site:"),
    ("unknown-model", TOPIC_USAGE, usage_bytes("G1", T, "u-x", gpu_model="V100"), "gpu_model:"),
    ("power-too-high", TOPIC_POWER, power_bytes("G1", T, "p-x", 5001), "power_w:"),
    # NOW + 601 s is refused; the clock is `now`, passed in
    ("future", TOPIC_USAGE, usage_bytes("G1", T + 3600 + 601, "u-x"), "ts:"),
    ("missing-field", TOPIC_USAGE, b'{"kind": "usage"}', "event_id: missing field"),
    # issue 13: a key given twice is refused, never "last one wins" (here: bill the attacker)
    ("tenant-twice", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="victim")[:-1] + b', "tenant": "attacker"}',
     'duplicate key "tenant"'),
    ("power-twice", TOPIC_POWER, power_bytes("G1", T, "p-x", 1)[:-1] + b', "power_w": 4999}', 'duplicate key "power_w"'),
    ("empty-batch", TOPIC_POWER, b"[]", "empty batch"),
    ("empty-batch-spaced", TOPIC_USAGE, b" [\n ] ", "empty batch"),
    ("tenant-path", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="../acme"), "tenant: must be an id"),
    ("tenant-slash", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="acme/x"), "tenant: must be an id"),
    ("tenant-nul", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="acme\x00"), "tenant: must be an id"),
    ("tenant-newline", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="acme\n"), "tenant: must be an id"),
    ("tenant-rtl", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="\u202eemca"), "tenant: must be an id"),
    ("tenant-lookalike", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="\u0430cme"), "tenant: must be an id"),
    ("tenant-too-long", TOPIC_USAGE, usage_bytes("G1", T, "u-x", tenant="a" * 65), "tenant: must be an id"),
]


@pytest.mark.parametrize(("topic", "value", "reason_start"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_messages_become_dead_letters_with_reasons(topic: str, value: bytes | None, reason_start: str) -> None:
    message = msg(topic, 3, 77, value)
    result = run([message])
    assert [letter.message for letter in result.deadletters] == [message]
    letter = result.deadletters[0]
    assert letter.reason.startswith(reason_start), letter.reason
    assert result.outcome.rated == [] and result.outcome.readings_usage == [] and result.outcome.readings_power == []
    assert result.positions == {(topic, 3): 78}
    assert result.readings_in == {topic: 1}
    headers = dict(letter.headers())
    assert headers[H_REASON].decode() == letter.reason
    assert (headers[H_TOPIC], headers[H_PARTITION], headers[H_OFFSET]) == (topic.encode(), b"3", b"77")
    assert letter.row(NOW) == (topic, 3, 77, 0, 0, letter.reason, value or b"", NOW)


def test_a_batched_message_is_validated_element_by_element() -> None:
    # a node agent sends its cards' power in one message: two good elements, one bad one
    good_1, good_2 = power_bytes("G1", T, "p-1"), power_bytes("G2", T, "p-2")
    bad = power_bytes("G3", T, "p-3", 6000)
    batch = b"[" + good_1 + b", " + bad + b",\n" + good_2 + b"]"
    result = run([msg(TOPIC_POWER, 5, 9, batch)])
    assert sorted(row[5] for row in result.outcome.readings_power) == ["G1", "G2"]  # both good ones rated
    [letter] = result.deadletters
    assert letter.reason.startswith("element 2: power_w:"), letter.reason
    assert letter.message.value == bad  # the bad element alone, byte for byte
    assert letter.row(NOW)[:5] == (TOPIC_POWER, 5, 9, 0, 2)
    assert result.positions == {(TOPIC_POWER, 5): 10} and result.readings_in == {TOPIC_POWER: 1}


def test_a_reading_before_the_first_rule_is_dead_lettered_not_fatal() -> None:
    # the shipped rules start on 2025-01-01; 2024-06-01T00:00:00Z = 1717200000 passes validation
    early = power_bytes("G1", 1717200000, "p-early")
    result = run([msg(TOPIC_POWER, 0, 0, b"[" + power_bytes("G1", T, "p-1") + b"," + early + b"]")])
    [letter] = result.deadletters
    assert letter.reason.startswith("element 2: cannot be priced:"), letter.reason
    assert [row[5] for row in result.outcome.readings_power] == ["G1"] and len(result.outcome.rated) == 1


def test_an_empty_batch_is_dead_lettered_not_dropped() -> None:
    result = run([msg(TOPIC_POWER, 0, 0, b" [ ] ")])
    assert [(d.reason, d.index, d.message.value) for d in result.deadletters] == [
        ("empty batch: a batch must hold at least one reading", 0, b" [ ] ")]
    assert result.outcome.rated == []


def test_a_repeated_key_in_one_element_refuses_that_element_alone() -> None:
    twice = power_bytes("G2", T, "p-2", 1)[:-1] + b', "power_w": 4999}'
    result = run([msg(TOPIC_POWER, 0, 0, b"[" + power_bytes("G1", T, "p-1") + b"," + twice + b"]")])
    assert [(d.reason, d.message.value) for d in result.deadletters] == [('element 2: duplicate key "power_w"', twice)]
    assert [(row[5], row[6]) for row in result.outcome.readings_power] == [("G1", 300_000)]


def test_future_is_measured_from_now_passed_in() -> None:
    # exactly NOW + 600 s is still accepted
    result = run([msg(TOPIC_USAGE, 0, 0, usage_bytes("G1", T + 3600 + 600, "u-1"))])
    assert result.deadletters == [] and len(result.outcome.readings_usage) == 1


def test_dead_letter_keeps_undecodable_bytes_exactly() -> None:
    value = b"\xff\xfe{not json"
    letter = run([msg(TOPIC_USAGE, 0, 0, value)]).deadletters[0]
    assert letter.row(NOW)[6] == value  # bytes, stored as they came


def test_dead_letter_read_back_from_its_topic() -> None:
    letter = DeadLetter(msg(TOPIC_POWER, 5, 42, b"oops"), "not JSON: x", line=3)
    record = Message(TOPIC_DEADLETTER, 0, 9, b"G1", b"oops", tuple(letter.headers()))
    assert deadletter_row_from_record(record, NOW) == (TOPIC_POWER, 5, 42, 3, 0, "not JSON: x", b"oops", NOW)


def test_a_bad_message_does_not_stop_the_batch() -> None:
    result = run([
        msg(TOPIC_USAGE, 0, 0, usage_bytes("G1", T, "u-1")),
        msg(TOPIC_USAGE, 0, 1, b"not json"),
        msg(TOPIC_POWER, 0, 0, power_bytes("G1", T, "p-1")),
    ])
    assert [letter.message.offset for letter in result.deadletters] == [1]
    assert sorted((r["stream"], r["tenant"]) for r in rows(result)) == [("energy", "acme"), ("rent", "acme")]


# positions --------------------------------------------------------------------------


def test_positions_are_last_offset_plus_one_per_topic_partition() -> None:
    messages = [
        msg(TOPIC_USAGE, 0, 10, usage_bytes("G1", T, "u-1")),
        msg(TOPIC_USAGE, 0, 11, b"bad"),  # dead letters move the position too
        msg(TOPIC_POWER, 0, 5, power_bytes("G1", T, "p-1")),
        msg(TOPIC_POWER, 0, 6, power_bytes("G1", T, "p-1")),  # a duplicate moves it as well
        msg(TOPIC_USAGE, 1, 3, usage_bytes("G2", T, "u-2")),
        msg(TOPIC_POWER, 2, 0, None),
        msg(TOPIC_POWER, 7, 100, power_bytes("G7", T, "p-7")),
        msg(TOPIC_POWER, 7, 99, power_bytes("G7", T + 1, "p-8")),  # the highest offset counts
    ]
    result = run(messages)
    assert result.positions == {
        (TOPIC_USAGE, 0): 12, (TOPIC_POWER, 0): 7, (TOPIC_USAGE, 1): 4, (TOPIC_POWER, 2): 1, (TOPIC_POWER, 7): 101,
    }
    assert result.readings_in == {TOPIC_USAGE: 3, TOPIC_POWER: 5}
    assert result.outcome.duplicates == 1


def test_rows_carry_the_message_position() -> None:
    result = run([msg(TOPIC_POWER, 4, 1234, power_bytes("G1", T, "p-1"))])
    (energy,) = rows(result)
    assert (energy["src_partition"], energy["src_offset"], energy["rated_at"]) == (4, 1234, NOW)


# lookups ----------------------------------------------------------------------------


class RecordingLookup:
    """A fake of streams.sink.StoredLookup without its per-card check: answers from fixed stored rows, records the asks."""

    def __init__(self, usage_rows: list[tuple] = (), power_rows: list[tuple] = ()) -> None:
        self.usage_rows, self.power_rows = list(usage_rows), list(power_rows)
        self.calls: list[tuple[set, set]] = []

    def __call__(self, need_usage: set, need_power: set):
        self.calls.append((set(need_usage), set(need_power)))
        return (
            [r for r in self.usage_rows if (r[0], r[1]) in need_usage],
            [r for r in self.power_rows if (r[0], r[1]) in need_power],
        )


def test_lookup_asked_for_counterparts_and_preloaded_rows_attribute() -> None:
    lookup = RecordingLookup(
        # (gpu, second, event_id, tenant, instance, gpu_model, offset): stored by an earlier process
        usage_rows=[("G1", T, "u-stored", "acme", "i-stored", "A800-80G", 8)],
        # (gpu, second, event_id, site, node, power_mw, partition, offset)
        power_rows=[("G2", T + 1, "p-stored", "gz-guian", "node-02", 250_000, 1, 40, 0, "")],
    )
    result = run([
        msg(TOPIC_POWER, 0, 9, power_bytes("G1", T, "p-new", 400)),
        msg(TOPIC_USAGE, 1, 41, usage_bytes("G2", T + 1, "u-new", "tenant-x")),
    ], lookup=lookup)
    # a fresh process has seen nothing of either gpu: both streams of both keys are asked for, once
    # (and for counter energy the cards' power readings 10 s around, with the usage of those seconds
    # for a power reading)
    assert lookup.calls == [({("G2", T + 1)} | around("G1", T), around("G1", T) | around("G2", T + 1))]
    by_key = {(r["stream"], r["gpu_uuid"]): r for r in rows(result)}
    assert sorted(by_key) == [("energy", "G1"), ("energy", "G2"), ("rent", "G2")]
    g1 = by_key[("energy", "G1")]
    assert (g1["tenant"], g1["instance"], g1["energy_mj"], g1["src_offset"]) == ("acme", "i-stored", 400_000, 9)
    g2 = by_key[("energy", "G2")]  # the stored power, joined with the new usage
    assert (g2["tenant"], g2["energy_mj"], g2["node"], g2["src_partition"], g2["src_offset"]) == (
        "tenant-x", 250_000, "node-02", 1, 40,
    )


def test_lookup_not_called_when_memory_answers() -> None:
    rater, lookup = Rater(RULES), RecordingLookup()
    run([msg(TOPIC_USAGE, 0, i, usage_bytes("G1", T + i, f"u-{i}")) for i in range(3)]
        + [msg(TOPIC_POWER, 0, 0, power_bytes("G1", T, "p-0"))], rater, lookup)
    assert len(lookup.calls) == 1
    # Two horizons (1,800 s) and the 10 s counter energy reads after the first seconds seen, no
    # other process can have G1's readings: memory alone decides (its usage is in memory; its power has not arrived).
    result = run([
        msg(TOPIC_USAGE, 0, 3, usage_bytes("G1", T + 1811, "u-1811")),
        msg(TOPIC_POWER, 0, 1, power_bytes("G1", T + 1811, "p-1811")),
        msg(TOPIC_USAGE, 0, 4, usage_bytes("G1", T + 1812, "u-1812")),
    ], rater, lookup)
    assert len(lookup.calls) == 1
    assert [(r["stream"], r["second"], r["tenant"]) for r in rows(result)] == [
        ("rent", T + 1811, "acme"), ("rent", T + 1812, "acme"), ("energy", T + 1811, "acme"),
    ]  # usage is rated before power within a batch


class CardCheckingLookup(RecordingLookup):
    """RecordingLookup with StoredLookup's per-card question: `held` cards have stored readings."""

    def __init__(self, held: set[str], **rows) -> None:
        super().__init__(**rows)
        self.held, self.asked = held, []

    def stored_since(self, cards: dict) -> dict:
        self.asked.append(cards)
        return {stream: set(since) & self.held for stream, since in cards.items()}


def test_a_card_clickhouse_holds_nothing_of_is_checked_once_and_never_looked_up_by_key() -> None:
    rater, lookup = Rater(RULES), CardCheckingLookup(held={"G2"})
    run([msg(TOPIC_USAGE, 0, 0, usage_bytes("G1", T + 5, "u-g1")), msg(TOPIC_USAGE, 0, 1, usage_bytes("G2", T, "u-g2"))],
        rater, lookup)
    # since = the card's oldest second in the batch − one horizon (900 s)
    assert lookup.asked == [{"usage": {"G1": T + 5 - 900, "G2": T - 900}, "power": {"G1": T + 5 - 900, "G2": T - 900}}]
    assert lookup.calls == [({("G2", T)}, around("G2", T))]  # nothing of G1 is asked for
    run([msg(TOPIC_POWER, 0, 0, power_bytes("G1", T + 5, "p-g1")), msg(TOPIC_POWER, 0, 1, power_bytes("G1", T - 899, "p-late")),
         msg(TOPIC_POWER, 0, 2, power_bytes("G2", T + 1, "p-g2"))], rater, lookup)
    assert len(lookup.asked) == 1  # each card once
    # G1 from T + 5 − 900 on needs nothing, but T − 899 is older: asked for as before, with the
    # seconds around it older than T + 5 − 900 (counter energy reads 10 s either side), as is
    # every key of G2, which ClickHouse holds readings of
    older = {("G1", s) for s in range(T - 909, T + 5 - 900)}
    assert lookup.calls[1] == (older | around("G2", T + 1) - {("G2", T)}, older | around("G2", T + 1))  # G2's usage at T is held


def around(gpu: str, second: int) -> set[tuple[str, int]]:
    """(gpu, s) for every s within 10 s of `second`, itself included."""
    return {(gpu, s) for s in range(second - 10, second + 11)}


def test_power_before_its_usage_in_one_batch_gives_one_joined_row() -> None:
    result = run([
        msg(TOPIC_POWER, 0, 0, power_bytes("G1", T, "p-0", 400)),
        msg(TOPIC_USAGE, 0, 0, usage_bytes("G1", T, "u-0")),
    ])
    energy = [r for r in rows(result) if r["stream"] == "energy"]
    assert [(r["tenant"], r["energy_mj"]) for r in energy] == [("acme", 400_000)]  # 400 W × 1 s, joined once


def test_dead_letters_are_not_looked_up() -> None:
    lookup = RecordingLookup()
    run([msg(TOPIC_POWER, 0, 0, b"bad"), msg(TOPIC_USAGE, 0, 0, usage_bytes("G1", T, "u", site="x"))], lookup=lookup)
    assert lookup.calls == []


def test_without_lookup_energy_is_unallocated() -> None:
    result = run([msg(TOPIC_POWER, 0, 0, power_bytes("G1", T, "p-1"))], lookup=None)
    assert [r["tenant"] for r in rows(result)] == [""]
