"""Rater (SPEC §4): dedupe, rent rows, energy attribution, convergence, bounded state.

Longer than 400 lines on purpose: the reference rater's whole contract, case by case, on
the shared epoch-second table below; one file keeps the arithmetic in one place.

Shipped rules (billing_rules/default): site gz-guian PUE 1.12, ¥0.33/kWh flat, Asia/Shanghai;
A800-80G ¥3180/month or ¥10/h; RTX4090 ¥599/month or ¥1.25/h; acme rents A800-80G
monthly from 2026-01-01 (local), everything else is hourly.

Epoch seconds (Asia/Shanghai is UTC+8, no DST):
    2026-03-01T00:00:00Z                       = 1 772 323 200  (08:00 local, March)
    2026-03-01 00:00 local = 2026-02-28T16:00Z = 1 772 294 400
    March = 31 × 86 400 = 2 678 400 s;   February 2026 = 28 × 86 400 = 2 419 200 s
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing_rules import DEFAULT_RULES_DIR, load_rules
from schemas.events import PowerReading, UsageReading
from schemas.tables import CONFLICTS, RATED_SECONDS, READINGS_POWER, READINGS_USAGE
from streams.rating.reference import Outcome, Rater

RULES = load_rules(DEFAULT_RULES_DIR)
MAR_1_UTC = 1_772_323_200
MAR_1_LOCAL = 1_772_294_400
T = MAR_1_UTC + 3600  # 2026-03-01T01:00:00Z = 09:00 local, well inside March
NOW = datetime(2026, 3, 1, 1, 5, tzinfo=UTC)  # the rated_at of these tests
MARCH_S = 31 * 86_400  # 2 678 400
FEB_S = 28 * 86_400  # 2 419 200
PUE, TARIFF = Decimal("1.12"), Decimal("0.33")
MODEL_OF = {"G1": "A800-80G", "G2": "RTX4090", "G3": "A800-80G"}


def iso(second: int, fraction: str = "") -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S") + fraction + "Z"


def usage(gpu: str, second: int, event_id: str, tenant: str | None = "acme", instance: str | None = "i-1",
          *, model: str | None = None, util: Any = 50, node: str = "node-01") -> UsageReading:
    return UsageReading.model_validate({
        "kind": "usage", "event_id": event_id, "ts": iso(second, ".25"), "site": "gz-guian", "node": node,
        "gpu_uuid": gpu, "gpu_model": model or MODEL_OF[gpu], "tenant": tenant, "instance": instance,
        "util_pct": util, "mem_used_mib": 1024,
    })


def power(gpu: str, second: int, event_id: str, power_w: Any = 300, *, node: str = "node-01") -> PowerReading:
    return PowerReading.model_validate({
        "kind": "power", "event_id": event_id, "ts": iso(second), "site": "gz-guian", "node": node,
        "gpu_uuid": gpu, "power_w": power_w,
    })


def row(values: tuple) -> dict[str, Any]:
    assert len(values) == len(RATED_SECONDS)
    return dict(zip(RATED_SECONDS, values))


def feed(rater: Rater, *items: tuple) -> Outcome:
    """items: (reading, partition, offset); all into one Outcome."""
    out = Outcome()
    for reading, partition, offset in items:
        rater.rate(reading, partition, offset, NOW, out)
    return out


# rent -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tenant", "gpu", "second", "period", "plan", "price", "per_s"),
    [
        # acme's A800 contract is monthly: ¥3180 over the 2 678 400 s of March
        ("acme", "G1", T, "2026-03", "monthly", Decimal(3180), MARCH_S),
        # first second of March local time (2026-02-28T16:00:00Z)
        ("acme", "G1", MAR_1_LOCAL, "2026-03", "monthly", Decimal(3180), MARCH_S),
        # last second of February local time: February has 28 days in 2026
        ("acme", "G1", MAR_1_LOCAL - 1, "2026-02", "monthly", Decimal(3180), FEB_S),
        # before the contract (2025-12-31 12:00 local): hourly list rate, ¥10/h
        ("acme", "G1", MAR_1_LOCAL - (59 + 1) * 86_400 + 12 * 3600, "2025-12", "hourly", Decimal(10), 3600),
        # acme has no RTX4090 term: hourly ¥1.25
        ("acme", "G2", T, "2026-03", "hourly", Decimal("1.25"), 3600),
        # a tenant without any contract: hourly ¥10 for the A800
        ("tenant-x", "G1", T, "2026-03", "hourly", Decimal(10), 3600),
        ("tenant-x", "G2", T, "2026-03", "hourly", Decimal("1.25"), 3600),
    ],
)
def test_rent_row_per_rented_second(tenant, gpu, second, period, plan, price, per_s) -> None:
    rater = Rater(RULES)
    out = feed(rater, (usage(gpu, second, "u-1", tenant, "inst-7", util=Decimal("87.5")), 3, 41))
    assert len(out.rated) == 1
    assert row(out.rated[0]) == {
        "stream": "rent", "gpu_uuid": gpu, "second": second, "period": period, "tenant": tenant,
        "instance": "inst-7", "gpu_model": MODEL_OF[gpu], "site": "gz-guian", "node": "node-01",
        "plan": plan, "rent_price": price, "rent_per_s": per_s, "discount_pct": 0, "util_pct": Decimal("87.5"),
        "energy_mj": 0, "band": "", "tariff_per_kwh": 0, "pue": 0, "version": row(out.rated[0])["version"],
        "src_partition": 3,
        "src_offset": 41, "measured": 0, "rated_at": NOW,
    }


def test_december_epoch_constant() -> None:
    # 2025-12-31 12:00 local = MAR_1_LOCAL − 60 days + 12 h (Jan 31 + Feb 28 + 1 day of Dec)
    assert MAR_1_LOCAL - 60 * 86_400 + 12 * 3600 == int(datetime(2025, 12, 31, 4, tzinfo=UTC).timestamp())


def test_whole_month_of_monthly_rent_is_exactly_the_monthly_price() -> None:
    # Σ over March of price / per_s = 2 678 400 × 3180 / 2 678 400 = ¥3180 exactly
    rater = Rater(RULES)
    out = feed(rater, (usage("G1", MAR_1_LOCAL + 17, "u-1"), 0, 0))
    rent = row(out.rated[0])
    assert rent["rent_price"] * MARCH_S / rent["rent_per_s"] == Decimal(3180)


def test_idle_usage_gives_no_rent_but_is_recorded() -> None:
    rater = Rater(RULES)
    out = feed(rater, (usage("G1", T, "u-1", None, None), 0, 5))
    assert out.rated == []
    assert len(out.readings_usage) == 1
    recorded = dict(zip(READINGS_USAGE, out.readings_usage[0]))
    assert (recorded["event_id"], recorded["second"], recorded["tenant"], recorded["instance"]) == ("u-1", T, None, None)
    assert (recorded["src_partition"], recorded["src_offset"], recorded["ingested_at"]) == (0, 5, NOW)


def test_rent_instance_none_is_written_as_empty() -> None:
    out = feed(Rater(RULES), (usage("G1", T, "u-1", "acme", None), 0, 0))
    assert row(out.rated[0])["instance"] == ""


# energy -----------------------------------------------------------------------------


def test_energy_attributed_when_usage_came_first() -> None:
    rater = Rater(RULES)
    feed(rater, (usage("G1", T, "u-1", "acme", "i-9"), 2, 10))
    out = feed(rater, (power("G1", T, "p-1", Decimal("412.3456")), 2, 20))  # 412 345.6 mW → 412 346 mJ
    assert len(out.rated) == 1
    energy = row(out.rated[0])
    assert energy == {
        "stream": "energy", "gpu_uuid": "G1", "second": T, "period": "2026-03", "tenant": "acme",
        "instance": "i-9", "gpu_model": "A800-80G", "site": "gz-guian", "node": "node-01", "plan": "",
        "rent_price": 0, "rent_per_s": 0, "discount_pct": 0, "util_pct": 0, "energy_mj": 412_346, "band": "flat",
        "tariff_per_kwh": TARIFF, "pue": PUE, "version": energy["version"], "src_partition": 2,
        "src_offset": 20, "measured": 0, "rated_at": NOW,
    }
    recorded = dict(zip(READINGS_POWER, out.readings_power[0]))
    assert (recorded["power_mw"], recorded["second"], recorded["src_offset"]) == (412_346, T, 20)


def test_power_first_then_usage_converges_to_the_tenant() -> None:
    rater = Rater(RULES)
    first = feed(rater, (power("G1", T, "p-1", 300), 0, 7))
    later = feed(rater, (usage("G1", T, "u-1", "acme", "i-1"), 0, 3))
    unjoined = row(first.rated[0])
    assert (unjoined["stream"], unjoined["tenant"], unjoined["instance"], unjoined["energy_mj"]) == ("energy", "", "", 300_000)
    by_stream = {row(r)["stream"]: row(r) for r in later.rated}
    assert sorted(by_stream) == ["energy", "rent"]
    joined = by_stream["energy"]
    assert (joined["gpu_uuid"], joined["second"]) == ("G1", T)
    assert (joined["tenant"], joined["instance"], joined["gpu_model"]) == ("acme", "i-1", "A800-80G")
    assert joined["version"] > unjoined["version"]
    # the energy row keeps the power reading's position, not the usage's
    assert (joined["src_partition"], joined["src_offset"], joined["energy_mj"]) == (0, 7, 300_000)
    assert (joined["band"], joined["tariff_per_kwh"], joined["pue"]) == ("flat", TARIFF, PUE)


def test_power_first_then_idle_usage_stays_unallocated_with_higher_version() -> None:
    rater = Rater(RULES)
    first = feed(rater, (power("G1", T, "p-1"), 0, 7))
    later = feed(rater, (usage("G1", T, "u-1", None, None), 0, 3))
    assert [row(r)["stream"] for r in later.rated] == ["energy"]
    joined = row(later.rated[0])
    assert (joined["tenant"], joined["instance"]) == ("", "")
    assert joined["version"] > row(first.rated[0])["version"]


def test_power_without_usage_is_unallocated() -> None:
    out = feed(Rater(RULES), (power("G1", T, "p-1", 5000), 0, 0))
    energy = row(out.rated[0])
    assert (energy["tenant"], energy["instance"], energy["energy_mj"]) == ("", "", 5_000_000)


def test_usage_of_another_second_does_not_attribute() -> None:
    rater = Rater(RULES)
    feed(rater, (usage("G1", T, "u-1"), 0, 0), (usage("G2", T + 1, "u-2"), 0, 1))
    out = feed(rater, (power("G1", T + 1, "p-1"), 0, 0), (power("G2", T, "p-2"), 0, 1))
    assert [row(r)["tenant"] for r in out.rated] == ["", ""]


def test_earlier_offset_has_the_higher_version() -> None:
    # versions: joined beats unjoined, then the earlier offset wins
    out = feed(Rater(RULES), (power("G1", T, "p-1"), 0, 100), (power("G2", T, "p-2"), 0, 101))
    assert row(out.rated[0])["version"] > row(out.rated[1])["version"]


# duplicates and conflicts -----------------------------------------------------------


def test_same_event_id_is_one_reading() -> None:
    rater = Rater(RULES)
    out = feed(
        rater,
        (usage("G1", T, "u-1"), 0, 0), (usage("G1", T, "u-1"), 0, 1),
        (power("G1", T, "p-1"), 0, 0), (power("G1", T, "p-1"), 0, 1), (power("G1", T, "p-1"), 0, 2),
    )
    assert out.duplicates == 3
    assert (len(out.readings_usage), len(out.readings_power), len(out.conflicts)) == (1, 1, 0)
    assert sorted(row(r)["stream"] for r in out.rated) == ["energy", "rent"]


def test_conflicts_are_recorded_and_the_first_is_kept() -> None:
    rater = Rater(RULES)
    out = feed(
        rater,
        (usage("G1", T, "u-first", "acme", "i-1"), 4, 10),
        (usage("G1", T, "u-second", "tenant-x", "i-2"), 4, 11),
        (power("G1", T, "p-first", 300), 4, 20),
        (power("G1", T, "p-second", 999), 4, 21),
    )
    assert out.duplicates == 0
    assert [dict(zip(CONFLICTS, c)) for c in out.conflicts] == [
        {"stream": "usage", "gpu_uuid": "G1", "second": T, "kept_event_id": "u-first",
         "conflicting_event_id": "u-second", "src_partition": 4, "src_offset": 11, "detected_at": NOW,
         "reason": "second taken"},
        {"stream": "power", "gpu_uuid": "G1", "second": T, "kept_event_id": "p-first",
         "conflicting_event_id": "p-second", "src_partition": 4, "src_offset": 21, "detected_at": NOW,
         "reason": "second taken"},
    ]
    rows = [row(r) for r in out.rated]
    assert [(r["stream"], r["tenant"], r["energy_mj"]) for r in rows] == [("rent", "acme", 0), ("energy", "acme", 300_000)]
    assert [r[0] for r in out.readings_usage] == ["u-first"]
    assert [r[0] for r in out.readings_power] == ["p-first"]


@pytest.mark.parametrize(("again", "what"), [
    (lambda: usage("G3", T, "u-1"), "another card"),
    (lambda: usage("G1", T + 1, "u-1"), "another second"),
    (lambda: usage("G1", T, "u-1", "mallory"), "another tenant"),
    (lambda: usage("G1", T, "u-1", None), "no tenant"),
    (lambda: usage("G1", T, "u-1", instance="i-9"), "another instance"),
    (lambda: usage("G1", T, "u-1", model="RTX4090"), "another model"),
    (lambda: power("G3", T, "p-1"), "another card (power)"),
    (lambda: power("G1", T, "p-1", Decimal("300.001")), "another power, by one milliwatt"),
    (lambda: power("G1", T, "p-1", node="node-02"), "another node"),
])
def test_a_reused_event_id_with_other_content_is_a_conflict(again, what) -> None:
    # An attacker (or a broken agent) reusing a known event_id must not make its reading
    # vanish as a "duplicate": it is recorded, and the first reading still counts.
    rater = Rater(RULES)
    first = usage("G1", T, "u-1") if again().kind == "usage" else power("G1", T, "p-1")
    out = feed(rater, (first, 2, 5), (again(), 2, 6))
    reused = again()
    assert out.duplicates == 0, what
    assert [dict(zip(CONFLICTS, c)) for c in out.conflicts] == [
        {"stream": reused.kind, "gpu_uuid": reused.gpu_uuid, "second": reused.second, "kept_event_id": first.event_id,
         "conflicting_event_id": first.event_id, "src_partition": 2, "src_offset": 6, "detected_at": NOW,
         "reason": "event_id reused"},
    ], what
    kept = out.readings_usage if first.kind == "usage" else out.readings_power
    assert [(r[0], r[5]) for r in kept] == [(first.event_id, "G1")]
    # the (gpu, second) the reused id named stays free for its own reading
    later = usage(reused.gpu_uuid, reused.second, "u-own") if first.kind == "usage" else power(reused.gpu_uuid, reused.second, "p-own")
    if (reused.gpu_uuid, reused.second) != ("G1", T):
        assert feed(rater, (later, 2, 7)).conflicts == []


def test_a_redelivery_differing_only_where_nothing_is_held_is_a_duplicate() -> None:
    # Not compared (not held by either rater): ts text within the second, util_pct,
    # mem_used_mib, a usage reading's node and site.
    rater = Rater(RULES)
    again = UsageReading.model_validate({**usage("G1", T, "u-1").model_dump(), "ts": iso(T, ".75"), "util_pct": 99,
                                         "mem_used_mib": 7, "node": "node-09"})
    out = feed(rater, (usage("G1", T, "u-1"), 0, 0), (again, 0, 1), (power("G1", T, "p-1"), 0, 2),
               (power("G1", T, "p-1"), 0, 3))
    assert (out.duplicates, out.conflicts) == (2, [])


def test_same_second_on_another_gpu_is_no_conflict() -> None:
    out = feed(Rater(RULES), (usage("G1", T, "u-1"), 0, 0), (usage("G3", T, "u-2"), 0, 1))
    assert out.conflicts == [] and len(out.rated) == 2


# eviction ---------------------------------------------------------------------------


def test_eviction_bounds_state_for_a_long_run() -> None:
    # 2 h of one gpu, one usage and one power reading per second, batches of 60 s,
    # horizon 900 s: after each batch at most 901 seconds (newest − 900 … newest) of each
    # stream stay, and within a batch at most 60 more: ≤ 2 × (901 + 60) entries.
    horizon, batch = 900, 60
    rater = Rater(RULES, horizon_s=horizon)
    peak = 0
    for start in range(0, 7200, batch):
        out = Outcome()
        for i in range(start, start + batch):
            rater.rate(usage("G1", T + i, f"u-{i}"), 0, i, NOW, out)
            rater.rate(power("G1", T + i, f"p-{i}"), 0, i, NOW, out)
            peak = max(peak, rater.state_size)
        rater.evict()
        assert rater.state_size <= 2 * (horizon + 1)
    assert peak <= 2 * (horizon + 1 + batch)
    # at the end: seconds 7199 − 900 = 6299 … 7199 of both streams, 901 each
    assert rater.state_size == 2 * 901


def test_eviction_waits_for_the_slower_stream() -> None:
    rater = Rater(RULES, horizon_s=900)
    out = Outcome()
    rater.rate(usage("G1", T, "u-0"), 0, 0, NOW, out)
    for i in range(0, 2000):  # power runs 2000 s ahead of usage (< 4 horizons)
        rater.rate(power("G2", T + i, f"p-{i}"), 0, i, NOW, out)
    rater.evict()
    # cutoff = slower (T) − 900: the usage of T stays, so a late power of T still joins
    late = feed(rater, (power("G1", T, "p-late"), 0, 5000))
    assert row(late.rated[0])["tenant"] == "acme"


def test_eviction_bounded_when_one_stream_stops() -> None:
    # usage stops at T; power goes on for 2 h. The slower clock is capped at four
    # horizons behind: cutoff = newest − 4 × 900 − 900, so ≤ 5 × 900 + 1 power seconds stay.
    rater = Rater(RULES, horizon_s=900)
    feed(rater, (usage("G1", T, "u-0"), 0, 0))
    for start in range(0, 7200, 60):
        out = Outcome()
        for i in range(start, start + 60):
            rater.rate(power("G1", T + i, f"p-{i}"), 0, i, NOW, out)
        rater.evict()
    assert rater.state_size <= 5 * 900 + 1


def test_eviction_forgets_event_ids_with_their_entries() -> None:
    rater = Rater(RULES, horizon_s=10)
    feed(rater, (usage("G1", T, "u-old"), 0, 0), (power("G1", T, "p-old"), 0, 0))
    feed(rater, (usage("G1", T + 100, "u-new"), 0, 1), (power("G1", T + 100, "p-new"), 0, 1))
    assert rater.evict() == 2
    assert rater.state_size == 2


# lookups and preload ----------------------------------------------------------------


def test_lookups_ask_clickhouse_only_where_another_process_may_have_been() -> None:
    rater = Rater(RULES, horizon_s=900)
    feed(rater, (usage("G1", T + 100, "u-100"), 0, 0), (usage("G1", T + 4000, "u-4000"), 0, 1))
    feed(rater, (power("G1", T + 300, "p-300"), 0, 0))
    # First seconds this process saw of G1: usage T + 100, power T + 300. Another process may
    # hold readings up to two horizons (1,800 s) past those: usage ≤ T + 1,900, power ≤ T + 2,100.
    # Counter energy also needs the card's power readings 10 s around each reading, and a power
    # reading the usage of those seconds (billing_rules/counters.py): asked where unsure too.
    need_usage, need_power = rater.lookups([
        power("G1", T + 2000, "a"),  # own stream and its neighbours asked (≤ T + 2,100); usage not (> T + 1,900)
        power("G1", T + 2500, "b"),  # past both windows: memory decides, not yet arrived
        usage("G1", T + 100, "c"),  # own in memory; its power and neighbours (≤ T + 2,100) asked
        usage("G1", T + 300, "d"),  # own asked (≤ T + 1,900); its power is in memory, its neighbours asked
        power("G3", T + 5000, "e"),  # G3 never seen: both streams asked, and both streams' neighbours
    ])
    assert need_usage == {("G1", T + 300)} | around("G3", T + 5000)
    assert need_power == (around("G1", T + 2000) | around("G1", T + 100) | around("G1", T + 300) - {("G1", T + 300)}
                          | around("G3", T + 5000))


def around(gpu: str, second: int) -> set[tuple[str, int]]:
    """(gpu, s) for every s within 10 s of `second`, itself included."""
    return {(gpu, s) for s in range(second - 10, second + 11)}


def test_lookups_of_a_fresh_process_ask_for_everything() -> None:
    readings = [usage("G1", T, "u"), power("G2", T + 1, "p")]
    assert Rater(RULES).lookups(readings) == ({("G1", T)} | around("G2", T + 1), around("G1", T) | around("G2", T + 1))


def test_a_forgetting_rater_asks_again() -> None:
    rater = Rater(RULES)
    feed(rater, (usage("G1", T, "u-0"), 0, 0), (power("G1", T, "p-0"), 0, 0))
    # memory answers both; the card's other power readings 10 s around T may be another
    # process's (its first seconds here): counter energy reads them
    assert rater.lookups([usage("G1", T, "u-0")]) == (set(), around("G1", T) - {("G1", T)})
    rater.forget()  # a rebalance: another worker may rate G1 meanwhile
    assert rater.lookups([usage("G1", T, "u-0")]) == ({("G1", T)}, around("G1", T))


def test_preloaded_usage_attributes_power() -> None:
    rater = Rater(RULES)
    # (gpu, second, event_id, tenant, instance, gpu_model, offset)
    rater.preload_usage([("G1", T, "u-stored", "acme", "i-5", "A800-80G", 17)])
    out = feed(rater, (power("G1", T, "p-1"), 1, 30))
    energy = row(out.rated[0])
    assert (energy["tenant"], energy["instance"], energy["gpu_model"]) == ("acme", "i-5", "A800-80G")
    # a redelivery of the stored usage is a duplicate, not a second rent row
    again = feed(rater, (usage("G1", T, "u-stored", "acme", "i-5"), 1, 17))
    assert (again.duplicates, again.rated, again.conflicts) == (1, [], [])
    # the stored id with another tenant is a conflict, recorded
    other = feed(rater, (usage("G1", T, "u-stored", "mallory", "i-5"), 1, 18))
    assert (other.duplicates, other.rated, [c[-1] for c in other.conflicts]) == (0, [], ["event_id reused"])


def test_preloaded_power_is_joined_when_its_usage_arrives() -> None:
    rater = Rater(RULES)
    # (gpu, second, event_id, site, node, power_mw, partition, offset, energy_mj, energy_epoch)
    rater.preload_power([("G1", T, "p-stored", "gz-guian", "node-01", 250_500, 6, 90, 0, "")])
    out = feed(rater, (usage("G1", T, "u-1", "tenant-x", "i-3"), 6, 91))
    energy = [row(r) for r in out.rated if row(r)["stream"] == "energy"]
    assert len(energy) == 1
    assert (energy[0]["tenant"], energy[0]["energy_mj"], energy[0]["src_partition"], energy[0]["src_offset"]) == (
        "tenant-x", 250_500, 6, 90,
    )


# convergence: any arrival order gives the batch join --------------------------------

GPUS = ("G1", "G2")
NO_USAGE = "no-usage"
# the plan each (tenant, model) is priced on in March 2026, from the rule files by hand
PRICES = {
    ("acme", "A800-80G"): ("monthly", Decimal(3180), MARCH_S),
    ("acme", "RTX4090"): ("hourly", Decimal("1.25"), 3600),
    ("tenant-x", "A800-80G"): ("hourly", Decimal(10), 3600),
    ("tenant-x", "RTX4090"): ("hourly", Decimal("1.25"), 3600),
}
COMPARED = [c for c in RATED_SECONDS if c not in ("version", "rated_at")]

cells = st.dictionaries(
    keys=st.tuples(st.sampled_from(GPUS), st.integers(0, 3)),
    values=st.tuples(
        st.sampled_from([NO_USAGE, None, "acme", "tenant-x"]),  # usage: absent, idle, rented
        st.one_of(st.none(), st.integers(0, 5_000_000)),  # power in mW, or no power reading
    ),
    min_size=1,
    max_size=8,
)


def readings_of(grid: dict) -> list[tuple]:
    """(reading, partition, offset) per cell; partition per gpu, offsets in second order."""
    items, next_offset = [], {}
    for (gpu, i), (tenant, mw) in sorted(grid.items()):
        partition = GPUS.index(gpu)
        if tenant != NO_USAGE:
            offset = next_offset[("u", gpu)] = next_offset.get(("u", gpu), -1) + 1
            instance = None if tenant is None else f"i-{tenant}-{gpu}"
            items.append((usage(gpu, T + i, f"u-{gpu}-{i}", tenant, instance, util=i * 10), partition, offset))
        if mw is not None:
            offset = next_offset[("p", gpu)] = next_offset.get(("p", gpu), -1) + 1
            items.append((power(gpu, T + i, f"p-{gpu}-{i}", Decimal(mw) / 1000), partition, offset))
    return items


def batch_join(grid: dict, items: list[tuple]) -> dict[tuple, dict]:
    """SPEC §4 computed directly: rent per rented usage, energy joined on (gpu, second)."""
    position = {(r.kind, r.gpu_uuid, r.second): (p, o) for r, p, o in items}
    expected = {}
    for (gpu, i), (tenant, mw) in grid.items():
        second, model = T + i, MODEL_OF[gpu]
        instance = "" if tenant in (None, NO_USAGE) else f"i-{tenant}-{gpu}"
        if tenant not in (None, NO_USAGE):
            plan, price, per_s = PRICES[(tenant, model)]
            p, o = position[("usage", gpu, second)]
            expected[("rent", gpu, second)] = {
                "stream": "rent", "gpu_uuid": gpu, "second": second, "period": "2026-03", "tenant": tenant,
                "instance": instance, "gpu_model": model, "site": "gz-guian", "node": "node-01", "plan": plan,
                "rent_price": price, "rent_per_s": per_s, "discount_pct": 0, "util_pct": i * 10, "energy_mj": 0, "band": "",
                "tariff_per_kwh": 0, "pue": 0, "src_partition": p, "src_offset": o, "measured": 0,
            }
        if mw is not None:
            p, o = position[("power", gpu, second)]
            expected[("energy", gpu, second)] = {
                "stream": "energy", "gpu_uuid": gpu, "second": second, "period": "2026-03",
                "tenant": "" if tenant in (None, NO_USAGE) else tenant, "instance": instance,
                # power without any usage reading has no model: the join would give it one
                "gpu_model": "" if tenant == NO_USAGE else model, "site": "gz-guian", "node": "node-01",
                "plan": "", "rent_price": 0, "rent_per_s": 0, "discount_pct": 0, "util_pct": 0, "energy_mj": mw, "band": "flat",
                "tariff_per_kwh": TARIFF, "pue": PUE, "src_partition": p, "src_offset": o,
                "measured": 0,  # no counters here: each second its own power_w (test_counter_energy.py has them)
            }
    return expected


def final_rows(rated: list[tuple], grid: dict) -> dict[tuple, dict]:
    """Per (stream, gpu, second) the row with the highest version (ReplacingMergeTree FINAL)."""
    best: dict[tuple, tuple] = {}
    for values in rated:
        r = row(values)
        key = (r["stream"], r["gpu_uuid"], r["second"])
        if key in best and best[key][0] == r["version"]:
            assert {c: best[key][1][c] for c in COMPARED} == {c: r[c] for c in COMPARED}, "same version, other row"
        if key not in best or r["version"] > best[key][0]:
            best[key] = (r["version"], r)
    return {key: {c: r[c] for c in COMPARED} for key, (_, r) in best.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_arrival_order_converges_to_the_batch_join(data) -> None:
    grid = data.draw(cells, label="grid")
    items = readings_of(grid)
    # redeliveries: the same message (same event_id and position) again, anywhere
    again = data.draw(st.lists(st.sampled_from(items), max_size=4), label="redelivered") if items else []
    order = data.draw(st.permutations(items + again), label="order")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(order)), max_size=3), label="batches"))
    rater = Rater(RULES)
    rated, duplicates = [], 0
    for start, end in zip([0, *cuts], [*cuts, len(order)]):
        out = Outcome()
        for reading, partition, offset in order[start:end]:
            rater.rate(reading, partition, offset, NOW, out)
        rater.evict()
        rated += out.rated
        duplicates += out.duplicates
        assert out.conflicts == []
    assert duplicates == len(again)
    assert final_rows(rated, grid) == batch_join(grid, items)


def test_unallocated_energy_model_does_not_depend_on_order() -> None:
    idle_usage = (usage("G1", T, "u-0", None, None), 0, 0)  # G1 is an A800-80G
    lone_power = (power("G1", T + 1, "p-1"), 0, 0)  # no usage reading for T + 1
    one = Rater(RULES)
    first = feed(one, lone_power, idle_usage)
    two = Rater(RULES)
    second = feed(two, idle_usage, lone_power)
    model_first = [row(r)["gpu_model"] for r in first.rated if row(r)["second"] == T + 1]
    model_second = [row(r)["gpu_model"] for r in second.rated if row(r)["second"] == T + 1]
    assert model_first == model_second == [""]  # no usage reading for T + 1: no model


def test_a_counterpart_evicted_from_memory_is_looked_up() -> None:
    rater = Rater(RULES, horizon_s=900)
    feed(rater, (usage("G1", T, "u-0", "acme", "i-1"), 0, 0))  # usage stream stops here
    feed(rater, (power("G2", T + 5000, "p-ahead"), 0, 0))  # power runs 5000 s ahead (> 4 horizons)
    # cutoff = max(T, T + 5000 − 3600) − 900 = T + 500 > T: the usage of (G1, T) is evicted
    assert rater.evict() == 1
    late = power("G1", T, "p-late")
    need_usage, _ = rater.lookups([late])
    # the usage floor of G1 is T, but T is below the eviction cutoff T + 500: asked
    assert ("G1", T) in need_usage


def test_a_reading_that_cannot_be_priced_changes_nothing() -> None:
    from billing_rules import BillingRulesError

    rater = Rater(RULES)
    before_rules = 1717200000  # 2024-06-01T00:00:00Z, before the shipped rules start (2025-01-01)
    with pytest.raises(BillingRulesError):
        rater.rate(power("G1", before_rules, "p-old"), 0, 0, NOW, Outcome())
    assert rater.state_size == 0 and rater.newest_second == 0
    # G1's power clock did not start in 2024: a usage of G1 still asks ClickHouse for its power
    assert rater.lookups([usage("G1", T + 4000, "u-1")]) == ({("G1", T + 4000)}, around("G1", T + 4000))
