"""Energy from the cards' counters (SPEC §4, billing_rules/counters.py), in the definition and
in the Python reference rater: worked cases by hand, and the streaming rows converging to the
definition whatever the arrival order and however the readings are split into batches.

Convergence is judged as ClickHouse does it: of the rows written for one (stream, gpu,
second), the one with the highest version is the row (ReplacingMergeTree)."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing_rules import DEFAULT_RULES_DIR, load_rules
from billing_rules.counters import Sample, Share, card_energy, covered, rank, rise
from schemas.errors import InvalidReading
from schemas.events import PowerReading, UsageReading, parse_reading
from schemas.quick_parser import QuickParser
from schemas.tables import RATED_SECONDS
from streams.rating.reference import Outcome, Rater

RULES = load_rules(DEFAULT_RULES_DIR)
T = 1_772_323_200 + 3600  # 2026-03-01T01:00:00Z, inside March, flat tariff at gz-guian
NOW = datetime(2026, 3, 1, 1, 5, tzinfo=UTC)
W = 5_000_000  # 5,000 W for one second, in mJ


# -- the definition, by hand --------------------------------------------------------------


def test_rise_split_evenly_remainder_to_the_last() -> None:
    # 1,000,007 mJ over 3 s: 333,335 + 333,335 + 333,337 (1,000,007 = 3 × 333,335 + 2)
    shares = covered(Sample(T, 100_000, 5_000, "b1"), Sample(T + 3, 200_000, 1_005_007, "b1"))
    assert shares == [Share(T + 1, 333_335, True), Share(T + 2, 333_335, True), Share(T + 3, 333_337, True)]
    assert sum(s.energy_mj for s in shares) == 1_000_007


@pytest.mark.parametrize(("prev", "why"), [
    (None, "no previous reading"),
    (Sample(T - 11, 1, 0, "b1"), "11 s earlier: a longer gap than 10 s"),
    (Sample(T - 1, 1, 600_001, "b1"), "the counter fell: a reset"),
    (Sample(T - 1, 1, 0, "b2"), "another epoch: the driver was loaded again"),
    (Sample(T - 1, 1, None, None), "the previous reading had no counter"),
    (Sample(T - 2, 1, 600_000 - 2 * W - 1, "b1"), "10,000,001 mJ in 2 s: beyond 5,000 W"),
])
def test_falls_back_to_power_w(prev: Sample | None, why: str) -> None:
    cur = Sample(T, 412_346, 600_000, "b1")
    assert covered(prev, cur) == [Share(T, 412_346, False)], why


def test_a_reading_without_counter_falls_back_and_breaks_the_chain() -> None:
    samples = [Sample(T, 300_000, 1_000, "b"), Sample(T + 1, 310_000, None, None), Sample(T + 2, 320_000, 700_000, "b")]
    energy = card_energy(samples)
    # T: no previous → 300,000 estimated; T+1: no counter → 310,000 estimated; T+2: its previous
    # (T+1) has no counter → 320,000 estimated, never the rise from T (that would count T+1 twice)
    assert [(s.second, s.energy_mj, s.measured) for s in energy.values()] == [
        (T, 300_000, False), (T + 1, 310_000, False), (T + 2, 320_000, False)]


def test_exactly_5000_watts_and_exactly_ten_seconds_are_measured() -> None:
    assert rise(Sample(T - 10, 0, 0, "b"), Sample(T, 0, 10 * W, "b")) == 10 * W
    assert rise(Sample(T - 10, 0, 0, "b"), Sample(T, 0, 10 * W + 1, "b")) is None
    assert rank(T - 10, T) == 1 and rank(T - 1, T) == 10 and rank(T - 11, T) == 0 and rank(None, T) == 0


# -- validation of the counter fields -----------------------------------------------------


def _power_doc(**extra) -> dict:
    return {"kind": "power", "event_id": "p-1", "ts": "2026-03-01T01:00:00Z", "site": "gz-guian", "node": "n1",
            "gpu_uuid": "G1", "power_w": 300} | extra


@pytest.mark.parametrize(("extra", "reason"), [
    ({"energy_mj": 5}, "energy_mj and energy_epoch come together"),
    ({"energy_epoch": "b1"}, "energy_mj and energy_epoch come together"),
    ({"energy_mj": -1, "energy_epoch": "b1"}, "energy_mj"),
    ({"energy_mj": 1.5, "energy_epoch": "b1"}, "energy_mj"),
    ({"energy_mj": "5", "energy_epoch": "b1"}, "energy_mj"),
    ({"energy_mj": True, "energy_epoch": "b1"}, "energy_mj"),
    ({"energy_mj": 1 << 63, "energy_epoch": "b1"}, "energy_mj"),
    ({"energy_mj": 5, "energy_epoch": ""}, "energy_epoch"),
    ({"energy_mj": 5, "energy_epoch": "x" * 129}, "energy_epoch"),
    ({"energy_mj": 5, "energy_epoch": 7}, "energy_epoch"),
])
def test_bad_counters_are_refused_with_a_reason_and_never_taken_by_the_fast_path(extra, reason) -> None:
    raw = json.dumps(_power_doc(**extra)).encode()
    with pytest.raises(InvalidReading, match=reason):
        parse_reading(raw, known_sites=RULES.site_ids, known_models=RULES.model_ids, now_s=T)
    assert QuickParser(RULES.site_ids, RULES.model_ids)(raw, T, "power") is None


def test_the_fast_path_takes_a_plain_counter_exactly() -> None:
    raw = json.dumps(_power_doc(energy_mj=(1 << 63) - 1, energy_epoch="boot-7f3a")).encode()
    quick = QuickParser(RULES.site_ids, RULES.model_ids)(raw, T, "power")
    slow = parse_reading(raw, known_sites=RULES.site_ids, known_models=RULES.model_ids, now_s=T)
    assert (quick.energy_mj, quick.energy_epoch, quick.power_mw) == (slow.energy_mj, slow.energy_epoch, 300_000)
    assert quick.energy_mj == 9_223_372_036_854_775_807


# -- the reference rater ------------------------------------------------------------------


def _power(second: int, mw: int, counter: int | None = None, epoch: str | None = None, *, gpu: str = "G1",
           event: str | None = None) -> PowerReading:
    doc = {"kind": "power", "event_id": event or f"p-{gpu}-{second}",
           "ts": datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "site": "gz-guian",
           "node": "n1", "gpu_uuid": gpu, "power_w": Decimal(mw) / 1000}  # exact: whole mW
    if counter is not None:
        doc |= {"energy_mj": counter, "energy_epoch": epoch}
    return PowerReading.model_validate(doc)


def _usage(second: int, tenant: str | None, *, gpu: str = "G1") -> UsageReading:
    return UsageReading.model_validate({
        "kind": "usage", "event_id": f"u-{gpu}-{second}",
        "ts": datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "site": "gz-guian", "node": "n1",
        "gpu_uuid": gpu, "gpu_model": "A800-80G", "tenant": tenant, "instance": "i-1" if tenant else None,
        "util_pct": 50, "mem_used_mib": 1024})


def _final(rows: list[tuple]) -> dict[tuple, dict]:
    """The rows ClickHouse keeps: per (stream, gpu, second) the highest version's."""
    kept: dict[tuple, dict] = {}
    for values in rows:
        row = dict(zip(RATED_SECONDS, values))
        key = (row["stream"], row["gpu_uuid"], row["second"])
        if key not in kept or row["version"] > kept[key]["version"]:
            kept[key] = row
        elif row["version"] == kept[key]["version"]:
            assert _content(row) == _content(kept[key]), f"two rows of one version differ: {key}"
    return kept


def _content(row: dict) -> tuple:
    return tuple(v for k, v in row.items() if k not in ("version", "rated_at"))


def _energy(rows: dict[tuple, dict]) -> dict[int, tuple[str, int, int]]:
    """second → (tenant, mJ, measured) of the energy rows."""
    return {key[2]: (row["tenant"], row["energy_mj"], row["measured"]) for key, row in rows.items()
            if key[0] == "energy"}


def _rate(readings: list, batches: int = 1, seed: int = 0) -> dict[tuple, dict]:
    """Rate (reading, offset) pairs in the given order, in `batches` batches, by one rater."""
    rater, rows = Rater(RULES), []
    chunk = max(1, -(-len(readings) // batches))
    for start in range(0, len(readings), chunk):
        out = Outcome()
        part = readings[start:start + chunk]
        # within a batch the worker rates usage before power (reference_batch.process_batch)
        for reading, offset in sorted(part, key=lambda item: item[0].kind == "power"):
            rater.rate(reading, 0, offset, NOW, out)
        rows += out.rated
    return _final(rows)


def test_a_gap_is_measured_and_attributed_to_each_seconds_tenant() -> None:
    # Power at T (counter 1,000,000) and T+3 (counter 1,000,000 + 900,001); the readings of
    # T+1 and T+2 were lost. Usage: acme at T..T+1, beta at T+2..T+3.
    readings = [_usage(T, "acme"), _usage(T + 1, "acme"), _usage(T + 2, "beta"), _usage(T + 3, "beta"),
                _power(T, 250_000, 1_000_000, "b"), _power(T + 3, 260_000, 1_900_001, "b")]
    energy = _energy(_rate([(r, i) for i, r in enumerate(readings)]))
    # T: no previous reading → 250,000 estimated; 900,001 = 3 × 300,000 + 1 over T+1..T+3
    assert energy == {T: ("acme", 250_000, 0), T + 1: ("acme", 300_000, 1), T + 2: ("beta", 300_000, 1),
                      T + 3: ("beta", 300_001, 1)}


def test_a_late_reading_splits_the_interval_and_a_reset_in_it_withdraws_the_gap() -> None:
    # T (c=0) and T+4 (c=4,000,000) arrive first: T+1..T+4 measured at 1,000,000 each. Then
    # the late T+2 arrives with another epoch: (T, T+2] is no longer measurable → T+1 gets
    # nothing, T+2 its power_w; (T+2, T+4] neither (epochs differ) → T+3 nothing, T+4 power_w.
    first = [(_power(T, 100_000, 0, "a"), 0), (_power(T + 4, 140_000, 4_000_000, "a"), 1)]
    late = [(_power(T + 2, 120_000, 55, "z"), 2)]
    energy = _energy(_rate(first + late, batches=2))
    assert energy == {T: ("", 100_000, 0), T + 1: ("", 0, 0), T + 2: ("", 120_000, 0), T + 3: ("", 0, 0),
                      T + 4: ("", 140_000, 0)}
    # rated in one go, in order, the rows that carry energy are the same
    in_order = _energy(_rate(sorted(first + late, key=lambda item: item[0].second)))
    assert {s: v for s, v in in_order.items() if v[1]} == {s: v for s, v in energy.items() if v[1]}


def test_usage_arriving_after_the_gap_was_measured_joins_it() -> None:
    readings = [(_power(T, 1, 0, "b"), 0), (_power(T + 2, 1, 2_000_000, "b"), 1), (_usage(T + 1, "acme"), 2)]
    energy = _energy(_rate(readings, batches=3))
    assert energy[T + 1] == ("acme", 1_000_000, 1)
    assert energy[T + 2] == ("", 1_000_000, 1)


# -- any order, any batches: the definition ---------------------------------------------------


@st.composite
def _card_readings(draw) -> tuple[list, dict[int, str | None]]:
    """A card's power readings over 40 s with gaps, resets, epoch changes, missing counters
    and jumps; usage readings on some seconds (some rented, some not)."""
    seconds = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=30)))
    counter, epoch, readings = draw(st.integers(0, 10**9)), "e0", []
    for second in seconds:
        event = draw(st.sampled_from(["step", "step", "step", "reset", "epoch", "none", "jump"]))
        if event == "reset":
            counter = draw(st.integers(0, 1000))
        elif event == "epoch":
            epoch = f"e{draw(st.integers(1, 3))}"
        elif event == "jump":
            counter += 60 * W
        else:
            counter += draw(st.integers(0, 2 * W))
        mw = draw(st.integers(0, 5_000_000))
        readings.append(_power(T + second, mw, None if event == "none" else counter, None if event == "none" else epoch))
    tenants = {s: draw(st.sampled_from(["acme", "beta", None])) for s in draw(st.sets(st.integers(0, 40), max_size=40))}
    return readings, tenants


def _expected(readings: list, tenants: dict[int, str | None]) -> dict[int, tuple[str, int, int]]:
    """An independent statement of the definition: walk the card's readings in time order."""
    out: dict[int, tuple[str, int, int]] = {}
    prev = None
    for r in sorted(readings, key=lambda r: r.second):
        ok = (prev is not None and r.energy_mj is not None and prev.energy_mj is not None
              and r.energy_epoch == prev.energy_epoch and r.second - prev.second <= 10
              and 0 <= r.energy_mj - prev.energy_mj <= W * (r.second - prev.second))
        if ok:
            gap, total = r.second - prev.second, r.energy_mj - prev.energy_mj
            for k in range(1, gap + 1):
                mj = total // gap + (total - gap * (total // gap) if k == gap else 0)
                out[r.second - gap + k] = (tenants.get(r.second - gap + k - T) or "", mj, 1)
        else:
            out[r.second] = (tenants.get(r.second - T) or "", r.power_mw, 0)
        prev = r
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(card=_card_readings(), seed=st.integers(0, 2**32), batches=st.integers(1, 6))
def test_any_order_and_batching_converges_to_the_definition(card, seed, batches) -> None:
    readings, tenants = card
    items = [(r, i) for i, r in enumerate(readings)]
    items += [(_usage(T + s, tenant), 1000 + s) for s, tenant in tenants.items()]
    random.Random(seed).shuffle(items)
    energy = _energy(_rate(items, batches=batches))
    # rows with energy equal the definition; any other row is a withdrawn 0 mJ second
    assert {s: v for s, v in energy.items() if v[1] or s in _expected(readings, tenants)} == _expected(readings, tenants)
    assert all(v == (v[0], 0, 0) for s, v in energy.items() if s not in _expected(readings, tenants))
    # and the definition in billing_rules/counters.py says the same
    batch = card_energy(Sample(r.second, r.power_mw, r.energy_mj, r.energy_epoch) for r in readings)
    assert {s: (sh.energy_mj, int(sh.measured)) for s, sh in batch.items()} == \
        {s: (mj, m) for s, (_, mj, m) in _expected(readings, tenants).items()}
