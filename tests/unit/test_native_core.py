"""The Rust core (native/, `gpubill_native`) against the Python reference, batch by batch.

The same random batches — valid, duplicated, conflicting, shuffled, malformed, batched,
with numbers and timestamps on every edge the fast paths care about — go through
`process_batch` + `Rater` and through `process_batch_native` + `NativeRater`, with the
same ClickHouse look-ups faked from one store. Every Native block must be the same bytes
(the Python rows encoded by warehouse/native_format.py), and conflicts, duplicates, dead letters,
positions and counts the same. Where they agree, the Python rater's own tests
(test_rating.py, test_pipeline_batch.py: hand-worked expectations) vouch for both.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.rating.native import NativeRater, process_batch_native
from streams.kafka.message import Message
from streams.rating.reference_batch import process_batch
from streams.rating.reference import Rater
from streams.kafka.record_sets import RecordSet, record_batch
from streams.rating.reference import encode_outcome

if not NativeRater.available():
    if os.environ.get("CI") == "true":
        raise RuntimeError("gpubill_native is not built: CI must build native/ (scripts/bootstrap)")
    pytest.skip("gpubill_native is not built (scripts/bootstrap needs a Rust toolchain)", allow_module_level=True)

RULES = load_rules(DEFAULT_RULES_DIR)
SITES, MODELS = frozenset(RULES.site_ids), frozenset(RULES.model_ids)
T = 1_772_323_200  # 2026-03-01T00:00:00Z
NOW = datetime(2026, 3, 1, 1, 0, 0, 123456, tzinfo=UTC)  # T + 3600.123456
GPUS = ["GPU-a", "GPU-b", "GPU-ç"]  # one id outside ASCII

NUMBERS = ["0", "1", "50", "99.99995", "99.99994", "100", "100.0", "100.00001", "300", "412.3455", "412.34549999",
           "4999.9995", "5000", "5000.0004", "5001", "0.00005", "1e2", "-0", "-1", "01", "1.", "12.5E1", "true", '"5"',
           "null", "0.1234567890123456789", "1234567"]
COUNTERS = ["0", "71888725096", "9223372036854775807", "9223372036854775808", "18446744073709551616", "-1", "5.0",
            "1e3", '"5"', "null", "01", "true"]
EPOCH_TEXTS = ['"boot-1"', '"gz-a800-n01-boot-1"', '""', '"' + "x" * 128 + '"', '"' + "x" * 129 + '"', '"' + "é" * 128 + '"',
               "null", "5", '"b\\u00e9"', '"b\\n"', '" "']
STAMPS = ["2026-03-01T00:{m:02d}:{s:02d}Z", "2026-03-01T00:{m:02d}:{s:02d}.999Z", "2026-03-01T08:{m:02d}:{s:02d}+08:00",
          "2026-03-01t00:{m:02d}:{s:02d}z", "2026-03-01 00:{m:02d}:{s:02d}Z", "2026-02-30T00:{m:02d}:{s:02d}Z",
          "2026-03-01T00:{m:02d}:60Z", "2026-03-01T00:{m:02d}:{s:02d}", "2026-03-01T00:{m:02d}:{s:02d}.1234567891Z",
          "1999-12-31T23:{m:02d}:{s:02d}Z", "2026-03-01T02:{m:02d}:{s:02d}Z"]


@st.composite
def reading(draw, kind: str) -> bytes:
    second = draw(st.integers(0, 40))
    stamp = draw(st.sampled_from(STAMPS[:1] * 6 + STAMPS)).format(m=second // 60, s=second % 60)
    fields = {
        "kind": f'"{draw(st.sampled_from([kind] * 8 + ["usage", "power", "other"]))}"',
        "event_id": f'"{draw(st.sampled_from(["e", "f", "g"]))}{draw(st.integers(0, 30))}"',
        "ts": f'"{stamp}"',
        "site": f'"{draw(st.sampled_from(["gz-guian"] * 6 + ["nowhere", ""]))}"',
        "node": f'"{draw(st.sampled_from(["node-01", "node-02", "n" * 257, "nöde"]))}"',
        "gpu_uuid": '"' + draw(st.sampled_from(GPUS)) + '"',
    }
    if kind == "usage":
        fields |= {
            "gpu_model": f'"{draw(st.sampled_from(["A800-80G"] * 4 + ["H800-80G", "RTX-4090-24G", "TPU"]))}"',
            "tenant": draw(st.sampled_from(['"acme"', '"acme"', '"beta"', "null", '""', '"t\\u00e9"', '"a/b"', '".."',
                                            '"acme\\n"', '"x\\u202eq"', '"\u0430cme"', '"' + "t" * 65 + '"'])),
            "instance": draw(st.sampled_from(['"i-1"', "null", '"i-2"'])),
            "util_pct": draw(st.sampled_from(NUMBERS[:8] + NUMBERS)),
            "mem_used_mib": draw(st.sampled_from(["1024", "0", "1099511627776", "1099511627777", "1.0", "-1"])),
        }
    else:
        fields["power_w"] = draw(st.sampled_from(NUMBERS[8:16] + NUMBERS))
        counter = draw(st.integers(0, 11))
        if counter <= 4:  # the card's counter: both fields, one alone, on every edge
            if counter <= 3:
                fields["energy_mj"] = draw(st.sampled_from(COUNTERS[:3] + COUNTERS))
            if counter != 3:
                fields["energy_epoch"] = draw(st.sampled_from(EPOCH_TEXTS[:2] + EPOCH_TEXTS))
    if draw(st.integers(0, 20)) == 0:
        del fields[draw(st.sampled_from(sorted(fields)))]
    if draw(st.integers(0, 20)) == 0:
        fields["extra"] = "1"
    items = [f'"{k}": {v}' for k, v in fields.items()]
    if draw(st.integers(0, 30)) == 0:
        items.append(items[0])  # a repeated key
    if draw(st.integers(0, 30)) == 0:  # a repeated key with another value: never "last one wins"
        name = draw(st.sampled_from(sorted(fields)))
        items.insert(draw(st.integers(0, len(items))), f'"{name}": ' + draw(st.sampled_from(['"attacker"', "4999", "null"])))
    space = draw(st.sampled_from(["", " ", "\n"]))
    return ("{" + space + ("," + space).join(items) + "}").encode()


@st.composite
def batch(draw) -> list[Message]:
    messages, offsets = [], {}
    for _ in range(draw(st.integers(1, 40))):
        topic = draw(st.sampled_from([TOPIC_USAGE, TOPIC_POWER]))
        kind = "usage" if topic == TOPIC_USAGE else "power"
        partition = draw(st.integers(0, 1))
        shape = draw(st.integers(0, 30))
        if shape == 0:
            value = b"[" + b", ".join(draw(st.lists(reading(kind), max_size=3))) + b"]"
        elif shape == 1:
            value = draw(st.sampled_from([b"", b"{", b"[1,", b"\xff", b"  {}", b"null"]))
        elif shape == 2:
            value = None
        else:
            value = draw(reading(kind))
        offset = offsets.setdefault((topic, partition), draw(st.integers(0, 5)))
        offsets[(topic, partition)] = offset + draw(st.integers(1, 2))
        messages.append(Message(topic, partition, offset, None, value))
    return messages


def python_blocks(outcome) -> dict:
    return {table: block for table, (block, _) in encode_outcome(outcome).items()}


class StoredFake:
    """A fake of streams.sink.StoredLookup answering from `store`: {(stream, gpu, second): row}."""

    def __init__(self, store: dict, *, cards: bool) -> None:
        self.store = store
        if not cards:  # the per-card check is optional (see streams.rating.validate.check_cards)
            self.stored_since = None

    def __call__(self, need_usage: set, need_power: set):
        return ([self.store[("usage",) + key] for key in sorted(need_usage) if ("usage",) + key in self.store],
                [self.store[("power",) + key] for key in sorted(need_power) if ("power",) + key in self.store])

    def kept_event_ids(self, stream: str, keys: set) -> dict:
        return {key: self.store[(stream,) + key][2] for key in keys if (stream,) + key in self.store}

    def wrote(self, outcome) -> None:
        """Keep what a batch wrote, as ClickHouse would (event ids of the readings that count)."""
        for row in outcome.readings_usage:  # (event_id, ts, second, site, node, gpu, …)
            self.store.setdefault(("usage", row[5], row[2]), (row[5], row[2], row[0], row[7], row[8], row[6], row[12]))
        for row in outcome.readings_power:  # (…, power_mw, partition, offset, energy_mj, energy_epoch, ingested_at)
            self.store.setdefault(("power", row[5], row[2]), (row[5], row[2], row[0], row[3], row[4], row[6], row[7],
                                                              row[8], row[9], row[10]))

    def stored_since(self, cards: dict) -> dict:
        return {stream: {gpu for (s, gpu, second) in self.store if s == stream and second >= since.get(gpu, 1 << 40)}
                for stream, since in cards.items()}


STORE = {
    ("usage", "GPU-a", T + 3): ("GPU-a", T + 3, "stored-u", "acme", "i-1", "A800-80G", 0),
    ("power", "GPU-b", T + 5): ("GPU-b", T + 5, "stored-p", "gz-guian", "node-01", 250_000, 0, 0, 0, ""),
    ("power", "GPU-a", T + 3): ("GPU-a", T + 3, "e7", "gz-guian", "node-02", 1, 1, 9, 0, ""),
}


def as_record_sets(messages: list[Message], *, gzip: bool = False, earlier: bool = False) -> list[RecordSet]:
    """`messages` as fetched record sets: one v2 batch per run of one partition, in order
    (so the core numbers the records as it numbers the messages). With `earlier` each set
    also holds a record before its start offset, as a fetch from inside a batch does."""
    runs: list[list[Message]] = []
    for m in messages:
        if runs and (runs[-1][0].topic, runs[-1][0].partition) == (m.topic, m.partition):
            runs[-1].append(m)
        else:
            runs.append([m])
    sets = []
    for run in runs:
        before = [(run[0].offset - 1, None, b"before the fetch position", 0, ())] if earlier and run[0].offset else []
        data = record_batch(before[0][0] if before else run[0].offset,
                            before + [(m.offset, m.key, m.value, 0, ()) for m in run], gzip=gzip)
        sets.append(RecordSet(run[0].topic, run[0].partition, data, run[0].offset, run[-1].offset + 1, plain=not gzip))
    return sets


# Spend marks: none (no spend work), none yet, or some on the tenants and partitions of `batch`
# (offsets up to 12: below, between and past what the batches read).
MARKS = st.one_of(st.none(), st.just({}), st.dictionaries(
    st.tuples(st.sampled_from(["acme", "beta", "nobody"]), st.integers(0, 1)),
    st.tuples(st.integers(0, 12), st.integers(0, 12)), max_size=6))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(batch(), min_size=1, max_size=4), st.integers(0, 4), st.sampled_from([5, 900]), st.booleans(),
       st.sampled_from(["messages", "sets", "sets from inside a batch", "gzip sets"]), MARKS)
def test_the_rust_core_writes_what_the_python_rater_writes(batches, forget_after, horizon_s, cards, fetched, marks):
    python, rust = Rater(RULES, horizon_s=horizon_s), NativeRater(RULES, horizon_s=horizon_s)
    lookup = StoredFake(dict(STORE), cards=cards)
    for number, messages in enumerate(batches):
        if number == forget_after:
            python.forget()
            rust.forget()
        expected = process_batch(messages, python, known_sites=SITES, known_models=MODELS, now=NOW, lookup=lookup,
                                 spend_marks=marks)
        items = messages if fetched == "messages" else as_record_sets(
            messages, gzip=fetched == "gzip sets", earlier=fetched == "sets from inside a batch")
        got = process_batch_native(items, rust, now=NOW, lookup=lookup, spend_marks=marks)
        # The same spend contributions (None without marks), Decimals equal by value.
        assert (got.spend is None) == (marks is None)
        assert got.spend == expected.spend
        lookup.wrote(expected.outcome)
        assert {t: b for t, (b, _) in got.outcome.blocks.items()} == python_blocks(expected.outcome)
        assert {t: n for t, (_, n) in got.outcome.blocks.items()} == {
            t: n for t, n in (("rated_seconds", len(expected.outcome.rated)),
                              ("readings_usage", len(expected.outcome.readings_usage)),
                              ("readings_power", len(expected.outcome.readings_power))) if n}
        assert got.outcome.conflicts == expected.outcome.conflicts
        assert got.outcome.duplicates == expected.outcome.duplicates
        assert got.outcome.unallocated == expected.outcome.unallocated
        assert got.outcome.hours == expected.outcome.hours  # once each, in order
        assert [(d.message, d.reason, d.index) for d in got.deadletters] == [
            (d.message, d.reason, d.index) for d in expected.deadletters]
        assert got.readings_in == expected.readings_in
        assert got.positions == expected.positions
        assert rust.state_size == python.state_size


def test_the_fast_path_takes_a_plain_reading_and_leaves_odd_ones_to_python():
    rust = NativeRater(RULES)
    plain = (b'{"kind": "power", "event_id": "p1", "ts": "2026-03-01T00:00:01Z", "site": "gz-guian", '
             b'"node": "node-01", "gpu_uuid": "GPU-a", "power_w": 412.3455}')
    exponent = plain.replace(b"412.3455", b"4.123455e2")
    others, counts, positions, judge, _ = rust.core.parse([Message(TOPIC_POWER, 0, 7, None, plain),
                                                           Message(TOPIC_POWER, 0, 8, None, exponent)], [], T + 60)
    assert others == [1] and judge == []  # the exponent goes to the definition (which accepts it)
    assert counts == {TOPIC_POWER: 2} and positions == {(TOPIC_POWER, 0): 9}
    # The same two records fetched as a record set: numbered on after the messages (none here).
    (fetched,) = as_record_sets([Message(TOPIC_POWER, 0, 7, b"k", plain), Message(TOPIC_POWER, 0, 8, b"k", exponent)])
    others, counts, positions, judge, stamps = rust.core.parse([], [(TOPIC_POWER, 0, fetched.data, 7)], T + 60, True)
    assert others == [] and counts == {TOPIC_POWER: 2} and positions == {} and stamps == [0, 0]
    assert judge == [(1, TOPIC_POWER, 0, 8, b"k", exponent, (), 0)]


def test_a_reading_that_cannot_be_priced_is_dead_lettered_alone():
    early = T - 10 * 366 * 86_400  # years before the first rule in force
    stamp = datetime.fromtimestamp(early, UTC).strftime("%Y-%m-%dT%H:%M:%SZ").encode()
    value = (b'{"kind": "power", "event_id": "p1", "ts": "' + stamp + b'", "site": "gz-guian", '
             b'"node": "node-01", "gpu_uuid": "GPU-a", "power_w": 300}')
    messages = [Message(TOPIC_POWER, 0, 0, None, value)]
    expected = process_batch(messages, Rater(RULES), known_sites=SITES, known_models=MODELS, now=NOW)
    got = process_batch_native(messages, NativeRater(RULES), now=NOW)
    assert len(expected.deadletters) == 1 and expected.deadletters[0].reason.startswith("cannot be priced: ")
    assert [d.reason for d in got.deadletters] == [d.reason for d in expected.deadletters]
    assert not got.outcome.blocks


def test_a_conflict_with_a_reading_of_an_earlier_batch_names_the_kept_id_from_clickhouse():
    def power(event_id: str, offset: int) -> Message:
        return Message(TOPIC_POWER, 0, offset, None, (
            b'{"kind": "power", "event_id": "' + event_id.encode() + b'", "ts": "2026-03-01T00:00:07Z", '
            b'"site": "gz-guian", "node": "node-01", "gpu_uuid": "GPU-a", "power_w": 300}'))

    python, rust = Rater(RULES), NativeRater(RULES)
    lookup = StoredFake({}, cards=True)
    for batch in ([power("kept", 0)], [power("late", 1), power("kept", 2)]):
        expected = process_batch(batch, python, known_sites=SITES, known_models=MODELS, now=NOW, lookup=lookup)
        got = process_batch_native(batch, rust, now=NOW, lookup=lookup)
        lookup.wrote(expected.outcome)
    # the second batch: "late" conflicts with "kept" (held by the core only as a hash), and a
    # second copy of "kept" is a duplicate
    assert got.outcome.conflicts == expected.outcome.conflicts == [
        ("power", "GPU-a", T + 7, "kept", "late", 0, 1, NOW, "second taken")]
    assert got.outcome.duplicates == expected.outcome.duplicates == 1


@pytest.mark.parametrize("reused", [
    (b'"GPU-b"', b"300", b"07"),  # another card
    (b'"GPU-a"', b"300", b"08"),  # another second
    (b'"GPU-a"', b"300.001", b"07"),  # another power, by one milliwatt
])
def test_a_reused_event_id_is_a_conflict_in_both_raters(reused):
    def power(gpu: bytes, watts: bytes, second: bytes, offset: int) -> Message:
        return Message(TOPIC_POWER, 0, offset, None, (
            b'{"kind": "power", "event_id": "p-1", "ts": "2026-03-01T00:00:' + second + b'Z", '
            b'"site": "gz-guian", "node": "node-01", "gpu_uuid": ' + gpu + b', "power_w": ' + watts + b'}'))

    python, rust = Rater(RULES), NativeRater(RULES)
    # across batches (the core holds the first only as hashes and interned texts) and within one
    for batches in ([[power(b'"GPU-a"', b"300", b"07", 0)], [power(*reused, 1)]],
                    [[power(b'"GPU-a"', b"300", b"07", 0), power(*reused, 1)]]):
        python.forget()
        rust.forget()
        for batch in batches:
            expected = process_batch(batch, python, known_sites=SITES, known_models=MODELS, now=NOW)
            got = process_batch_native(batch, rust, now=NOW)
        gpu, second = reused[0].strip(b'"').decode(), T + int(reused[2])
        assert got.outcome.conflicts == expected.outcome.conflicts == [
            ("power", gpu, second, "p-1", "p-1", 0, 1, NOW, "event_id reused")]
        assert got.outcome.duplicates == expected.outcome.duplicates == 0
        # the true duplicate stays a duplicate
        again = [power(b'"GPU-a"', b"300.0", b"07", 2)]
        expected = process_batch(again, python, known_sites=SITES, known_models=MODELS, now=NOW)
        got = process_batch_native(again, rust, now=NOW)
        assert (got.outcome.duplicates, got.outcome.conflicts) == (expected.outcome.duplicates, expected.outcome.conflicts) \
            == (1, [])


@pytest.mark.parametrize(("value", "reason"), [
    ((b'{"kind": "usage", "event_id": "u1", "ts": "2026-03-01T00:00:01Z", "site": "gz-guian", "node": "n1", '
      b'"gpu_uuid": "GPU-a", "gpu_model": "A800-80G", "tenant": "victim", "instance": null, "util_pct": 5, '
      b'"mem_used_mib": 1, "tenant": "attacker"}'), 'duplicate key "tenant"'),
    ((b'{"kind": "usage", "event_id": "u1", "ts": "2026-03-01T00:00:01Z", "site": "gz-guian", "node": "n1", '
      b'"gpu_uuid": "GPU-a", "gpu_model": "A800-80G", "tenant": "../etc", "instance": null, "util_pct": 5, '
      b'"mem_used_mib": 1}'), "tenant: must be an id"),
    (b" [ ] ", "empty batch"),
])
def test_what_the_definition_refuses_the_core_never_takes(value, reason):
    messages = [Message(TOPIC_USAGE, 0, 4, None, value)]
    others, *_ = NativeRater(RULES).core.parse(messages, [], T + 60)
    assert others == [0]  # left to the definition
    expected = process_batch(messages, Rater(RULES), known_sites=SITES, known_models=MODELS, now=NOW)
    got = process_batch_native(messages, NativeRater(RULES), now=NOW)
    assert [d.reason for d in got.deadletters] == [d.reason for d in expected.deadletters]
    assert len(got.deadletters) == 1 and got.deadletters[0].reason.startswith(reason), got.deadletters[0].reason
    assert not got.outcome.blocks


@st.composite
def dense_batch(draw) -> list[Message]:
    """Valid readings of 2 cards over 4 seconds: joins within and across batches are common."""
    messages = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["usage", "power"]))
        gpu, second = draw(st.sampled_from(GPUS[:2])), T + draw(st.integers(0, 3))
        fields = {"kind": kind, "event_id": f"{kind[0]}{draw(st.integers(0, 40))}", "ts": f"2026-03-01T00:00:0{second - T}Z",
                  "site": "gz-guian", "node": "node-01", "gpu_uuid": gpu}
        if kind == "usage":
            fields |= {"gpu_model": draw(st.sampled_from(["A800-80G", "H800-80G"])),
                       "tenant": draw(st.sampled_from(["acme", "beta", None])), "instance": None, "util_pct": 50,
                       "mem_used_mib": 1}
        else:
            fields["power_w"] = draw(st.sampled_from([0, 250, 412.3455]))
        messages.append((TOPIC_USAGE if kind == "usage" else TOPIC_POWER, draw(st.integers(0, 1)),
                         orjson.dumps(fields)))
    return messages


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(dense_batch(), min_size=1, max_size=4), MARKS, st.booleans())
def test_both_raters_count_the_same_spend_on_dense_batches(batches, marks, stored):
    python, rust = Rater(RULES), NativeRater(RULES)
    lookup = StoredFake(dict(STORE) if stored else {}, cards=True)
    offsets: dict = {}
    for drawn in batches:
        messages = []
        for topic, partition, value in drawn:  # offsets grow per partition across the batches
            offset = offsets[(topic, partition)] = offsets.get((topic, partition), -1) + 1
            messages.append(Message(topic, partition, offset, None, value))
        expected = process_batch(messages, python, known_sites=SITES, known_models=MODELS, now=NOW, lookup=lookup,
                                 spend_marks=marks)
        got = process_batch_native(messages, rust, now=NOW, lookup=lookup, spend_marks=marks)
        lookup.wrote(expected.outcome)
        assert {t: b for t, (b, _) in got.outcome.blocks.items()} == python_blocks(expected.outcome)
        assert got.spend == expected.spend


# -- counter energy (billing_rules/counters.py) ----------------------------------------------

EPOCHS = ["boot-1", "boot-2"]


@st.composite
def counted_card(draw, gpu: str, partition: int) -> list[tuple[str, int, bytes]]:
    """One card's readings over 40 s as (topic, partition, value), in second order: power
    readings with the card's counter rising as it draws — and a reset (the counter falls),
    an epoch change, a jump past 5 kW, a reading without a counter, seconds left out (gaps
    of 1–10 and 11+ s) — usage readings on some seconds, duplicates and conflicts."""
    out: list[tuple[str, int, bytes]] = []
    energy, epoch, second = draw(st.integers(0, 10**12)), 0, 0
    while second < 40:
        event = draw(st.sampled_from(["plain"] * 8 + ["skip", "skip", "long gap", "reset", "epoch", "none", "jump",
                                                      "same", "duplicate", "conflict"]))
        if event == "long gap":
            second += draw(st.integers(10, 14))
            continue
        watts = draw(st.sampled_from([0, 250, 412.3455, 700]))
        drawn = round(watts * 1000) + draw(st.integers(-999, 999))
        energy = max(energy + max(drawn, 0), 0)
        if event == "skip":
            second += 1
            continue
        if event == "reset":
            energy = draw(st.integers(0, 1000))
        elif event == "epoch":
            epoch = 1 - epoch
        elif event == "jump":
            energy += 5_000_001 * draw(st.integers(1, 11))
        elif event == "same":
            energy -= max(drawn, 0) if energy >= max(drawn, 0) else 0  # no rise at all
        fields = {"kind": "power", "event_id": f"p-{gpu}-{second}", "ts": f"2026-03-01T00:00:{second:02d}Z",
                  "site": draw(st.sampled_from(["gz-guian"] * 5 + ["sh-east"])), "node": "node-01", "gpu_uuid": gpu,
                  "power_w": watts}
        if event != "none":
            fields |= {"energy_mj": energy, "energy_epoch": EPOCHS[epoch]}
        value = orjson.dumps(fields)
        out.append((TOPIC_POWER, partition, value))
        if event == "duplicate":
            out.append((TOPIC_POWER, partition, value))
        elif event == "conflict":  # the same id with another counter, or the same second with another id
            other = dict(fields, energy_mj=energy + 1, energy_epoch="boot-1") if draw(st.booleans()) else \
                dict(fields, event_id=f"q-{gpu}-{second}")
            out.append((TOPIC_POWER, partition, orjson.dumps(other)))
        if draw(st.integers(0, 2)) == 0:
            usage = {"kind": "usage", "event_id": f"u-{gpu}-{second + draw(st.integers(-3, 3))}",
                     "ts": f"2026-03-01T00:00:{max(second + draw(st.integers(-3, 3)), 0):02d}Z", "site": "gz-guian",
                     "node": "node-01", "gpu_uuid": gpu, "gpu_model": "A800-80G",
                     "tenant": draw(st.sampled_from(["acme", "beta", None])), "instance": None, "util_pct": 50,
                     "mem_used_mib": 1}
            out.append((TOPIC_USAGE, partition, orjson.dumps(usage)))
        second += 1
    return out


@st.composite
def counted_batches(draw) -> list[list[Message]]:
    """Two cards' counted readings, shuffled (late readings), split into 1–5 batches; offsets
    grow per partition in the order they are sent."""
    readings = draw(counted_card("GPU-a", 0)) + draw(counted_card("GPU-b", draw(st.integers(0, 1))))
    readings = draw(st.permutations(readings)) if draw(st.booleans()) else readings
    offsets: dict = {}
    messages = []
    for topic, partition, value in readings:
        offset = offsets[(topic, partition)] = offsets.get((topic, partition), -1) + 1
        messages.append(Message(topic, partition, offset, None, value))
    cuts = sorted(draw(st.lists(st.integers(1, max(len(messages) - 1, 1)), max_size=4, unique=True)))
    return [messages[a:b] for a, b in zip([0] + cuts, cuts + [len(messages)]) if messages[a:b]]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(counted_batches(), st.integers(0, 5), st.sampled_from([5, 900]), st.booleans(), MARKS)
def test_both_raters_write_the_same_counter_energy(batches, forget_after, horizon_s, cards, marks):
    python, rust = Rater(RULES, horizon_s=horizon_s), NativeRater(RULES, horizon_s=horizon_s)
    lookup = StoredFake({}, cards=cards)
    rated, counted = [], []
    for number, messages in enumerate(batches):
        if number == forget_after:
            python.forget()
            rust.forget()
        expected = process_batch(messages, python, known_sites=SITES, known_models=MODELS, now=NOW, lookup=lookup,
                                 spend_marks=marks)
        items = messages if number % 2 else as_record_sets(messages)
        got = process_batch_native(items, rust, now=NOW, lookup=lookup, spend_marks=marks)
        lookup.wrote(expected.outcome)
        assert {t: b for t, (b, _) in got.outcome.blocks.items()} == python_blocks(expected.outcome)
        assert got.spend == expected.spend
        assert got.outcome.conflicts == expected.outcome.conflicts
        assert got.outcome.duplicates == expected.outcome.duplicates
        assert got.outcome.unallocated == expected.outcome.unallocated
        assert got.outcome.hours == expected.outcome.hours
        assert [(d.message, d.reason) for d in got.deadletters] == [(d.message, d.reason) for d in expected.deadletters]
        assert rust.state_size == python.state_size
        rated += expected.outcome.rated
        counted += expected.outcome.readings_power
    # Converged, evicted or forgotten readings looked up again — unless a forget meets readings
    # shuffled across more than the two horizons the look-ups allow for (40 s, horizon 5 s).
    if horizon_s == 900 or forget_after >= len(batches):
        _assert_converged(rated, counted, lookup)


def _assert_converged(rated: list[tuple], counted: list[tuple], lookup: StoredFake) -> None:
    """What ClickHouse keeps of the rows (the highest version per (gpu, second)) is the batch
    definition over the counted readings, whatever the arrival order: counters.card_energy,
    joined with the usage reading of the second."""
    from billing_rules.counters import Sample, card_energy

    kept: dict = {}
    for row in rated:
        if row[0] != "energy":
            continue
        key, version = (row[1], row[2]), row[18]
        if key not in kept or version > kept[key][0]:
            kept[key] = (version, [row])
        elif version == kept[key][0]:
            kept[key][1].append(row)
    for version, rows in kept.values():  # rows of one version say the same
        assert len({(r[14], r[21], r[4]) for r in rows}) == 1, rows
    for gpu in {row[5] for row in counted}:
        samples = [Sample(row[2], row[6], row[9] if row[10] else None, row[10] or None)
                   for row in counted if row[5] == gpu]
        shares = card_energy(samples)
        got = {second: (rows[0][14], bool(rows[0][21])) for (g, second), (_, rows) in kept.items()
               if g == gpu and (rows[0][14] or rows[0][21] or second in shares)}
        assert got == {second: (share.energy_mj, share.measured) for second, share in shares.items()}
        for (g, second), (_, rows) in kept.items():
            usage = lookup.store.get(("usage", g, second))
            if g == gpu and second in shares:
                assert rows[0][4] == ((usage[3] or "") if usage else ""), (second, rows[0])
