"""The fleet simulator: shape of the readings, determinism, realism, speed."""

from __future__ import annotations

import re
import statistics
import time
from datetime import datetime
from decimal import Decimal

import pytest

from gpubill.devenv.simulator import PROFILES, TYPICAL_UTIL, node_name, simulate_fleet

START = 1772323200  # 2026-03-01T00:00:00Z
USAGE_FIELDS = {"kind", "event_id", "ts", "site", "node", "gpu_uuid", "gpu_model", "tenant", "instance", "util_pct", "mem_used_mib"}
POWER_FIELDS = {"kind", "event_id", "ts", "site", "node", "gpu_uuid", "power_w"}
UUID = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def fleet(**overrides):
    args = dict(gpus=16, gpu_model="A800-80G", minutes=5, start=START, tenants=4)
    args.update(overrides)
    return list(simulate_fleet(**args))


def test_count_is_gpus_times_seconds_times_two():
    # 16 cards × 5 min × 60 s × (usage + power) = 9,600
    assert len(fleet()) == 16 * 5 * 60 * 2
    assert len(fleet(gpus=3, minutes=2)) == 3 * 2 * 60 * 2
    assert fleet(minutes=0) == []


def test_same_seed_same_readings_other_seed_other_readings():
    assert fleet() == fleet()
    assert fleet(seed=8) != fleet()


def test_a_longer_run_and_a_larger_fleet_extend_a_shorter_one():
    short = fleet(gpus=8, minutes=2)
    longer = fleet(gpus=8, minutes=4)
    assert longer[: len(short)] == short
    larger = fleet(gpus=16, minutes=2)
    # second 0: the first 8 cards' readings come first, identical
    assert larger[:16] == short[:16]


def test_readings_are_in_time_order_each_second_all_cards_usage_then_power():
    readings = fleet(gpus=4, minutes=1)
    seconds = [datetime.fromisoformat(r["ts"].replace("Z", "+00:00")).timestamp() for r in readings]
    assert seconds == sorted(seconds)
    assert seconds[0] == START and seconds[-1] == START + 59
    first_second = readings[:8]
    assert [r["kind"] for r in first_second] == ["usage", "power"] * 4
    assert len({r["gpu_uuid"] for r in first_second}) == 4


def test_fields_types_and_ranges_follow_the_event_spec():
    readings = fleet(gpus=24, minutes=3)
    event_ids = set()
    for r in readings:
        assert r["ts"].endswith("Z") and len(r["ts"]) == 20
        assert r["site"] == "gz-guian"
        assert UUID.match(r["gpu_uuid"])
        assert re.match(r"^gz-a800-n0[1-3]$", r["node"])
        assert 1 <= len(r["event_id"]) <= 128
        event_ids.add(r["event_id"])
        if r["kind"] == "usage":
            assert set(r) == USAGE_FIELDS
            assert r["gpu_model"] == "A800-80G"
            assert isinstance(r["util_pct"], (int, float)) and 0 <= r["util_pct"] <= 100
            assert round(r["util_pct"], 1) == r["util_pct"]
            assert isinstance(r["mem_used_mib"], int) and 0 <= r["mem_used_mib"] <= 81920
            assert (r["tenant"] is None) == (r["instance"] is None)
            if r["tenant"] is not None:
                assert re.match(r"^tenant-0[1-4]$", r["tenant"])
        else:
            assert r["kind"] == "power"
            assert set(r) == POWER_FIELDS
            assert isinstance(r["power_w"], float) and 0 <= r["power_w"] <= 5000
            assert round(r["power_w"], 1) == r["power_w"]
    assert len(event_ids) == len(readings)  # unique per reading


def test_some_cards_are_rented_and_some_are_not():
    usage = [r for r in fleet(gpus=32, minutes=2) if r["kind"] == "usage"]
    tenants = {r["tenant"] for r in usage}
    assert None in tenants
    assert len(tenants - {None}) >= 2
    # a free card is idle
    assert max(r["util_pct"] for r in usage if r["tenant"] is None) <= 0.5


def test_no_tenants_means_nobody_rents():
    usage = [r for r in fleet(tenants=0, minutes=1) if r["kind"] == "usage"]
    assert {r["tenant"] for r in usage} == {None}


def test_node_names_hold_eight_cards():
    usage = [r for r in fleet(gpus=20, minutes=1)[: 20 * 2] if r["kind"] == "usage"]
    per_node = {}
    for r in usage:
        per_node.setdefault(r["node"], set()).add(r["gpu_uuid"])
    assert {node: len(cards) for node, cards in per_node.items()} == {"gz-a800-n01": 8, "gz-a800-n02": 8, "gz-a800-n03": 4}
    assert node_name("gz-guian", "RTX4090", 0) == "gz-rtx4090-n01"


def test_mixed_models_take_nodes_in_turn_with_distinct_identities():
    readings = fleet(gpus=24, minutes=1, models=["A800-80G", "H800-80G"])
    usage = [r for r in readings[: 24 * 2] if r["kind"] == "usage"]
    assert [r["gpu_model"] for r in usage] == ["A800-80G"] * 8 + ["H800-80G"] * 8 + ["A800-80G"] * 8
    assert {r["node"] for r in usage} == {"gz-a800-n01", "gz-h800-n01", "gz-a800-n02"}
    assert len({r["gpu_uuid"] for r in usage}) == 24
    # the same seed for another model gives other cards (no dedupe clash between runs)
    rtx = fleet(gpu_model="RTX4090", minutes=1)
    assert rtx[0]["gpu_uuid"] != fleet(minutes=1)[0]["gpu_uuid"]


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown GPU model 'V100'"):
        fleet(gpu_model="V100")


@pytest.mark.parametrize(
    ("model", "operator_avg_w"),
    # SPEC §1: electricity/month ÷ (720 h × ¥0.33 × PUE 1.12) = average IT draw
    [("RTX4090", 203), ("A800-80G", 857), ("H800-80G", 947)],
)
def test_profiles_draw_the_operator_average_at_typical_load(model, operator_avg_w):
    assert abs(PROFILES[model].power_w(TYPICAL_UTIL) - operator_avg_w) <= Decimal("1")


def test_rented_a800_average_power_is_near_the_operator_figure():
    readings = fleet(gpus=64, minutes=20)
    usage, power = readings[0::2], readings[1::2]
    assert all(u["gpu_uuid"] == p["gpu_uuid"] and u["ts"] == p["ts"] for u, p in zip(usage, power))
    rented_w = [p["power_w"] for u, p in zip(usage, power) if u["tenant"] is not None]
    free_w = [p["power_w"] for u, p in zip(usage, power) if u["tenant"] is None]
    # operator: 857 W per rented A800 incl. host share; a free card idles near 250 W
    assert 760 <= statistics.mean(rented_w) <= 950
    assert 240 <= statistics.mean(free_w) <= 260
    # training leases sit high, near the card's maximum
    assert max(rented_w) > 1000


def test_power_follows_utilisation():
    readings = fleet(gpus=32, minutes=3)
    pairs = [(u["util_pct"], p["power_w"]) for u, p in zip(readings[0::2], readings[1::2])]
    busy = [w for util, w in pairs if util >= 90]
    quiet = [w for util, w in pairs if util <= 5]
    assert busy and quiet
    assert statistics.mean(busy) > statistics.mean(quiet) + 500


def test_generation_is_fast_enough():
    began = time.perf_counter()
    count = sum(1 for _ in simulate_fleet(gpus=64, gpu_model="A800-80G", minutes=5, start=START, tenants=5))
    rate = count / (time.perf_counter() - began)
    assert count == 38_400
    assert rate >= 20_000, f"{rate:.0f} readings/s"


def test_counters_are_off_unless_asked_and_change_nothing_else():
    plain, counted = fleet(gpus=9, minutes=1), fleet(gpus=9, minutes=1, counters=True)
    assert all(set(r) in (USAGE_FIELDS, POWER_FIELDS) for r in plain)
    assert [{k: v for k, v in r.items() if k not in ("energy_mj", "energy_epoch")} for r in counted] == plain
    power = [r for r in counted if r["kind"] == "power"]
    assert all(set(r) == POWER_FIELDS | {"energy_mj", "energy_epoch"} for r in power)
    # one counting run per node: cards 1–8 on node n01, card 9 on n02
    assert {r["energy_epoch"] for r in power} == {f"{node_name('gz-guian', 'A800-80G', n)}-boot-1" for n in (0, 1)}


def test_a_card_counter_rises_by_what_it_draws_read_up_to_50_ms_late():
    power = [r for r in fleet(gpus=4, minutes=2, counters=True) if r["kind"] == "power"]
    for gpu in {r["gpu_uuid"] for r in power}:
        card = [r for r in power if r["gpu_uuid"] == gpu]
        for before, after in zip(card, card[1:]):
            # E_t = drawn up to t − lag_t, lag_t < 5 % of second t's mJ: the rise of second t
            # lies in (0.95 P_t, P_t + 0.05 P_(t−1)], P in mJ = power_w × 1000
            rise = after["energy_mj"] - before["energy_mj"]
            p_now, p_before = after["power_w"] * 1000, before["power_w"] * 1000
            assert 0.95 * p_now - 1 <= rise <= p_now + 0.05 * p_before + 1, (rise, p_now, p_before)
        assert isinstance(card[0]["energy_mj"], int) and 0 <= card[0]["energy_mj"] < 10**12
