"""Spend contributions of rated batches, past the marks, worked by hand on both raters.

The rule (streams/rating/protocol.py): a rent row counts iff its usage offset ≥ the usage
mark of (tenant, partition); a joined energy row counts unless both its usage and power
offsets lie below their marks; unjoined energy and rows without a tenant never count. A
missing mark is (0, 0).

Prices of the default rules on 2026-03-01 (billing_rules/default), written out here:
acme rents an A800-80G monthly at ¥3180.00 per 2 678 400 s (31 days), no discount; beta
hourly at ¥10.00 per 3600 s; energy at gz-guian is flat ¥0.33/kWh with PUE 1.12.
Energy: 300 W for one second = 300 J = 300 000 mJ.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.kafka.message import Message
from streams.rating.native import NativeRater
from streams.rating.protocol import SpendContributions
from streams.rating.reference_batch import PythonRater

RULES = load_rules(DEFAULT_RULES_DIR)
T = 1_772_323_200  # 2026-03-01T00:00:00Z
NOW = datetime(2026, 3, 1, 1, 0, tzinfo=UTC)  # T + 3600


def rent(tenant: str, partition: int = 0) -> tuple:
    if tenant == "acme":
        return ("acme", partition, "2026-03", "A800-80G", "monthly", Decimal("3180.00"), 2_678_400, Decimal("0"))
    return ("beta", partition, "2026-03", "A800-80G", "hourly", Decimal("10.00"), 3600, Decimal("0"))


def energy(tenant: str, partition: int = 0) -> tuple:
    return (tenant, partition, "2026-03", "gz-guian", "flat", Decimal("0.33"), Decimal("1.12"))


def iso(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usage(partition: int, offset: int, gpu: str, second: int, tenant: str | None = "acme") -> Message:
    doc = {"kind": "usage", "event_id": f"u-{gpu}-{second}", "ts": iso(second), "site": "gz-guian", "node": "node-01",
           "gpu_uuid": gpu, "gpu_model": "A800-80G", "tenant": tenant, "instance": None, "util_pct": 50,
           "mem_used_mib": 1024}
    return Message(TOPIC_USAGE, partition, offset, gpu.encode(), json.dumps(doc).encode())


def power(partition: int, offset: int, gpu: str, second: int, watts: int = 300) -> Message:
    doc = {"kind": "power", "event_id": f"p-{gpu}-{second}", "ts": iso(second), "site": "gz-guian", "node": "node-01",
           "gpu_uuid": gpu, "power_w": watts}
    return Message(TOPIC_POWER, partition, offset, gpu.encode(), json.dumps(doc).encode())


class Stored:
    """A ClickHouse that holds `usage` rows (gpu, second, event_id, tenant, instance, model,
    offset) and `power` rows (gpu, second, event_id, site, node, power_mw, partition, offset, energy_mj, epoch)
    written by a worker before this one (no per-card check: every key is looked up)."""

    stored_since = None

    def __init__(self, usage: list[tuple] = (), power: list[tuple] = ()) -> None:
        self.usage, self.power = list(usage), list(power)

    def __call__(self, need_usage: set, need_power: set) -> tuple[list, list]:
        return ([row for row in self.usage if (row[0], row[1]) in need_usage],
                [row for row in self.power if (row[0], row[1]) in need_power])

    def kept_event_ids(self, stream: str, keys: set) -> dict:
        return {}


RATERS = ["python", "native"]


def make(kind: str):
    if kind == "native" and not NativeRater.available():
        pytest.skip("gpubill_native is not built (scripts/bootstrap needs a Rust toolchain)")
    return PythonRater(RULES) if kind == "python" else NativeRater(RULES)


@pytest.fixture(params=RATERS)
def rater(request):
    return make(request.param)


def spend(rater, messages: list[Message], marks, lookup=None) -> SpendContributions | None:
    return rater.rate_batch(messages, now=NOW, lookup=lookup, spend_marks=marks).spend


def test_without_marks_there_is_no_spend(rater):
    assert spend(rater, [usage(0, 0, "G1", T), power(0, 0, "G1", T)], None) is None


def test_a_batch_of_two_tenants(rater):
    batch = [
        usage(0, 0, "G1", T), usage(0, 1, "G1", T + 1), usage(0, 2, "G2", T, "beta"),
        power(0, 0, "G1", T, 300), power(0, 1, "G2", T, 250),
        power(0, 2, "G2", T + 1, 412),  # no usage of G2 at T+1: unallocated, never counts
    ]
    assert spend(rater, batch, {}) == SpendContributions(
        rent={rent("acme"): 2, rent("beta"): 1},  # acme: G1 at T and T+1; beta: G2 at T
        energy={energy("acme"): 300_000, energy("beta"): 250_000},  # 300 W × 1 s; 250 W × 1 s
    )


def test_power_before_usage_joins_in_the_later_batch(rater):
    # batch 1: the power alone is unallocated (no tenant yet): nothing counts
    assert spend(rater, [power(0, 0, "G1", T, 300)], {}) == SpendContributions()
    # batch 2: the usage reading rents 1 s and joins the held power: 300 W × 1 s = 300 000 mJ
    assert spend(rater, [usage(0, 0, "G1", T)], {}) == SpendContributions(
        rent={rent("acme"): 1}, energy={energy("acme"): 300_000})


def test_usage_before_power_across_two_batches(rater):
    assert spend(rater, [usage(0, 0, "G1", T, "beta")], {}) == SpendContributions(rent={rent("beta"): 1})
    assert spend(rater, [power(0, 0, "G1", T, 250)], {}) == SpendContributions(energy={energy("beta"): 250_000})


def test_marks_skip_rent_read_before_them(rater):
    batch = [usage(0, offset, "G1", T + offset) for offset in range(3)]  # acme, usage offsets 0, 1, 2
    batch += [usage(0, 3, "G2", T, "beta"), usage(1, 0, "G3", T)]
    marks = {("acme", 0): (2, 0), ("beta", 1): (9, 9)}
    assert spend(rater, batch, marks) == SpendContributions(rent={
        rent("acme"): 1,  # offsets 0 and 1 lie below the usage mark 2; offset 2 counts
        rent("beta"): 1,  # beta has no mark on partition 0 (its mark on 1 does not apply)
        rent("acme", 1): 1,  # nor acme on partition 1
    })


# marks of (acme, 0): usage 5, power 7
@pytest.mark.parametrize(("usage_offset", "power_offset", "expected"), [
    (4, 6, SpendContributions()),  # both below: counted before; the rent too (4 < 5)
    (4, 7, SpendContributions(energy={energy("acme"): 300_000})),  # the power at its mark: a new join
    (5, 6, SpendContributions(rent={rent("acme"): 1}, energy={energy("acme"): 300_000})),  # the usage at its mark
    (9, 9, SpendContributions(rent={rent("acme"): 1}, energy={energy("acme"): 300_000})),  # both past
])
@pytest.mark.parametrize("usage_first", [True, False])
def test_joins_count_unless_both_offsets_lie_below_the_marks(rater, usage_offset, power_offset, expected, usage_first):
    readings = [usage(0, usage_offset, "G1", T), power(0, power_offset, "G1", T, 300)]
    marks = {("acme", 0): (5, 7)}
    if usage_first:  # in one batch
        assert spend(rater, readings, marks) == expected
    else:  # the power in one batch, its usage in the next (that one emits the join)
        assert spend(rater, readings[1:], marks) == SpendContributions()
        assert spend(rater, readings[:1], marks) == expected


@pytest.mark.parametrize(("stored_offset", "expected"), [
    (4, SpendContributions()),  # usage 4 < 5 and power 6 < 7: the earlier worker counted the join
    (5, SpendContributions(energy={energy("acme"): 300_000})),  # usage 5 at its mark: not yet counted
])
def test_a_join_with_a_usage_reading_read_back_from_clickhouse(rater, stored_offset, expected):
    # After a restart the usage reading of G1 at T is in ClickHouse (written by the earlier
    # worker, offset `stored_offset`); the power reading at offset 6 comes again. No rent
    # (the usage reading is not rated again); the join counts by both offsets.
    stored = Stored(usage=[("G1", T, "u-G1-0", "acme", None, "A800-80G", stored_offset)])
    assert spend(rater, [power(0, 6, "G1", T, 300)], {("acme", 0): (5, 7)}, lookup=stored) == expected


def test_readings_without_a_tenant_and_zero_power_never_count(rater):
    batch = [usage(0, 0, "G1", T, None), power(0, 0, "G1", T, 300),  # joined, but no tenant
             usage(0, 1, "G2", T), power(0, 1, "G2", T, 0)]  # acme rents G2; 0 W is left out
    assert spend(rater, batch, {}) == SpendContributions(rent={rent("acme"): 1})


def test_the_native_rater_builds_decimals_of_the_rates_value():
    got = spend(make("native"), [usage(0, 0, "G1", T, "beta"), power(0, 0, "G1", T, 250)], {})
    ((rent_key, seconds),) = got.rent.items()
    assert rent_key == rent("beta") and seconds == 1
    assert hash(rent_key) == hash(rent("beta"))  # Decimal("10.000000") and Decimal("10.00") are one key


# -- replays: a batch re-read after a crash whose rows were stored and spend not produced ----

def _stored_usage(offset: int, tenant: str = "acme") -> tuple:
    """The usage reading of G1 at T as the earlier worker stored it (the message's event id)."""
    return ("G1", T, f"u-G1-{T}", tenant, None, "A800-80G", offset)


def _stored_power(offset: int, watts: int = 300) -> tuple:
    return ("G1", T, f"p-G1-{T}", "gz-guian", "node-01", watts * 1000, 0, offset, 0, "")


def test_a_replayed_usage_reading_counts_its_rent_once(rater):
    # The earlier worker stored the usage reading at offset 4 and crashed before producing
    # its spend (no marks). Re-read at offset 4 it is a duplicate for ClickHouse, but its
    # 1 s of rent counts; re-read once more (same process) it counts nothing.
    stored = Stored(usage=[_stored_usage(4)])
    assert spend(rater, [usage(0, 4, "G1", T)], {}, lookup=stored) == SpendContributions(rent={rent("acme"): 1})
    assert spend(rater, [usage(0, 4, "G1", T)], {}, lookup=stored) == SpendContributions()


def test_a_replay_below_the_marks_counts_nothing(rater):
    stored = Stored(usage=[_stored_usage(4)])
    assert spend(rater, [usage(0, 4, "G1", T)], {("acme", 0): (5, 0)}, lookup=stored) == SpendContributions()


def test_the_same_reading_at_another_offset_is_a_plain_duplicate(rater):
    # sent twice by its producer: the copy at offset 9 is no re-read and counts nothing
    stored = Stored(usage=[_stored_usage(4)])
    assert spend(rater, [usage(0, 9, "G1", T)], {}, lookup=stored) == SpendContributions()


def test_a_stored_pair_re_read_counts_its_rent_and_join_once(rater):
    # Both readings of G1 at T were stored (usage at 4, power at 6), their spend never
    # produced. Re-read, the usage reading counts 1 s and the join 300 W × 1 s; the power
    # reading re-read after it adds nothing (the join is counted).
    stored = Stored(usage=[_stored_usage(4)], power=[_stored_power(6)])
    assert spend(rater, [usage(0, 4, "G1", T)], {}, lookup=stored) == SpendContributions(
        rent={rent("acme"): 1}, energy={energy("acme"): 300_000})
    assert spend(rater, [power(0, 6, "G1", T)], {}, lookup=stored) == SpendContributions()


def test_a_re_read_power_reading_joins_a_stored_usage_once(rater):
    # usage stored at 4 and counted (below the usage mark 5), power stored at 6 past the
    # power mark 6: the join was not counted. The re-read power reading counts it.
    stored = Stored(usage=[_stored_usage(4)], power=[_stored_power(6)])
    marks = {("acme", 0): (5, 6)}
    assert spend(rater, [power(0, 6, "G1", T)], marks, lookup=stored) == SpendContributions(
        energy={energy("acme"): 300_000})
    assert spend(rater, [power(0, 6, "G1", T), usage(0, 4, "G1", T)], marks, lookup=stored) == SpendContributions()
