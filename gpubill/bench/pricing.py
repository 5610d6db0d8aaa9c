"""`gpubill bench pricing`: price a month of a fleet held as per-card, per-hour aggregates.

Times `billing_rules.aggregate.price_aggregates` on a synthetic month (`fleet_month`), the
pricing step of the hourly rollups that issue 12 puts under every read path; until then
no invoice path calls it, and the figure says what that step will cost, not what a
command costs today.
"""

from __future__ import annotations

import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from billing_rules import DEFAULT_RULES_DIR, RuleSet, load_rules
from billing_rules.aggregate import AggregateColumns, price_aggregates

EXAMPLE_TOU_DIR: Path = DEFAULT_RULES_DIR.parent / "examples" / "tou"


def bench_pricing(
    rules: RuleSet | None = None,
    cards: int = 1280,
    *,
    period: str = "2026-04",
    tenants: int = 40,
    repeat: int = 1,
) -> dict[str, float | int]:
    """Price a month of per-card, per-hour aggregates of a `cards`-card fleet; time it.

    The fleet: models mixed RTX4090 / A800-80G / H800-80G (2:2:1), `tenants` tenants
    renting every card all month, at the time-of-use site `gz-tou` of the example rules
    (`billing_rules/examples/tou/`, used when `rules` is None: weekday, weekend and
    holiday bands, a tariff change at 12:00 on the 15th, a price change mid-month).
    Buckets come from `aggregation_buckets`, so no aggregate straddles a price.

    Only `price_aggregates` is timed (time.perf_counter, best of `repeat`); building the
    rows is not. Returns {"gpu_seconds": N, "seconds": T, "gpu_seconds_per_s": N / T}.
    """
    if rules is None:
        rules = load_rules(EXAMPLE_TOU_DIR)
    columns = fleet_month(rules, cards, period=period, tenants=tenants)
    best = float("inf")
    priced = None
    for _ in range(max(repeat, 1)):
        began = time.perf_counter()
        priced = price_aggregates(rules, columns)
        best = min(best, time.perf_counter() - began)
    assert priced is not None
    return {"gpu_seconds": priced.gpu_seconds, "seconds": best, "gpu_seconds_per_s": priced.gpu_seconds / best}


_FLEET_MODELS = (("RTX4090", 203_000), ("A800-80G", 857_000), ("RTX4090", 203_000), ("A800-80G", 857_000), ("H800-80G", 947_000))


def fleet_month(rules: RuleSet, cards: int, *, period: str = "2026-04", tenants: int = 40, site: str = "gz-tou") -> AggregateColumns:
    """Synthetic per-card, per-bucket aggregates for `period`, grouped per card in time order.

    Cards come 8 to an instance of one model (RTX4090, A800-80G, RTX4090, A800-80G,
    H800-80G in turn), 4 instances to a tenant ("tenant-0", …, wrapping at `tenants`).
    Every card is rented every second and draws its model's average power (SPEC §1)
    ± up to 10 W, varying by card and bucket.
    """
    start, end = rules.period_bounds(period)
    edges = set(rules.price_boundaries(start, end, site=site))
    for tenant, model in {(_fleet_tenant(c, tenants), _fleet_model(c)[0]) for c in range(cards)}:
        edges.update(rules.price_boundaries(start, end, tenant=tenant, gpu_model=model))
    grid = sorted({*range(start, end, 3600), *edges, end})
    bucket_starts, bucket_ends = grid[:-1], grid[1:]
    lengths = [b - a for a, b in zip(bucket_starts, bucket_ends)]
    n = len(bucket_starts)
    columns: dict[str, list[Any]] = {f.name: [] for f in fields(AggregateColumns)}
    for c in range(cards):
        model, power_mw = _fleet_model(c)
        columns["tenant"] += [_fleet_tenant(c, tenants)] * n
        columns["instance"] += [f"inst-{c // 8}"] * n
        columns["gpu"] += [f"GPU-{c:05d}"] * n
        columns["gpu_model"] += [model] * n
        columns["site"] += [site] * n
        columns["start_s"] += bucket_starts
        columns["end_s"] += bucket_ends
        columns["seconds"] += lengths
        columns["energy_mj"] += [(power_mw + (c * 7919 + h * 104_729) % 20_000 - 10_000) * length for h, length in enumerate(lengths)]
    return AggregateColumns(**columns)


def _fleet_model(card: int) -> tuple[str, int]:
    return _FLEET_MODELS[(card // 8) % len(_FLEET_MODELS)]


def _fleet_tenant(card: int, tenants: int) -> str:
    return f"tenant-{(card // 32) % tenants}"
