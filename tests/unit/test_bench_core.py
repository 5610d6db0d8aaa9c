"""`gpubill bench rating` (gpubill/bench/rating.py) on a small fleet: it rates every reading."""

from __future__ import annotations

from itertools import islice

import pytest

from gpubill.bench.rating import bench_rating
from gpubill.devenv.simulator import simulate_fleet
from streams.rating.native import NativeRater

pytestmark = pytest.mark.skipif(not NativeRater.available(), reason="gpubill_native is not built")


def test_every_reading_is_rated_and_held_within_the_horizon() -> None:
    result = bench_rating(4, 30, batch_s=7)
    # 4 cards × 30 s × 2 streams = 240 readings, all within 15 minutes: all held
    assert result["readings"] == 240
    assert result["state_entries"] == 240
    assert result["core_per_s"] > 0 and result["state_mb"] > 0


def test_the_state_stops_growing_past_the_horizon() -> None:
    # 2 cards × 1,000 s: the slower stream's newest second is start + 999, the cutoff
    # 900 s before it, so seconds start + 99 … start + 999 stay: 901 per card and stream
    # (eviction is by whole (card, second) records in arrival order: none waits here).
    result = bench_rating(2, 1000, batch_s=50)
    assert result["state_entries"] == 2 * 2 * 901


def test_with_spend_a_second_core_rates_the_same_rounds_with_marks(monkeypatch) -> None:
    import gpubill.bench.rating as rating

    now_s = 1_780_000_000
    monkeypatch.setattr(rating.time, "time", lambda: now_s)  # the fleet the bench simulates, fixed
    result = bench_rating(4, 30, batch_s=7, spend=True)
    assert result["readings"] == 240 and result["core_per_s_spend"] > 0
    # the spend core counts one rented second per usage reading with a tenant: counted here from
    # the same simulated fleet (4 cards × 30 s, started 30 + 120 s before "now"), not by the core
    fleet = islice(simulate_fleet(gpus=4, gpu_model="A800-80G", minutes=1, start=now_s - 30 - 120, tenants=1), 240)
    rented_s = sum(1 for reading in fleet if reading["kind"] == "usage" and reading.get("tenant"))
    assert rented_s > 0 and result["spend_rent_s"] == rented_s
