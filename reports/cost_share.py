"""Cost share for finance (SPEC §6): per site and GPU model, what the cards earned and burned.

rent_revenue is after contract discounts. electricity_share = all electricity of the cards (billed to tenants + unallocated idle)
÷ rent revenue — the operator's "share" column (¥54 / ¥599 = 9 % for an RTX 4090).

Energy is graded (SPEC §4): measured_it_kwh and estimated_it_kwh split the cards' IT energy
(before PUE; billed to tenants and unallocated alike) into what their energy counters
measured and what was estimated from power readings, each rounded half up to 1e-6 kWh.

What-if: the same recorded energy priced with another site's PUE and tariff, minute by
minute (tariff bands change on minute boundaries at the finest), to show the saving.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

from billing_rules import MJ_PER_KWH, UnknownSite, billed_kwh, energy_amount, gpu_hours, rent_amount, round_fen, round_quantity
from usage.rated import card_models_sql, coverage, source_of

# Power seconds without any usage reading carry no model (the rater never guesses one, so
# rows converge whatever the arrival order); here, with the whole period at hand, such a
# card's model is taken from its usage readings at any time (usage.rated.card_models_sql).
_RATED = """
(SELECT r.* REPLACE (if(r.gpu_model != '', r.gpu_model, m.model) AS gpu_model)
 FROM {source} AS r LEFT JOIN {models} AS m ON r.gpu_uuid = m.gpu_uuid)
"""
_GROUPS_SQL = """
SELECT site, gpu_model, stream, tenant != '' AS allocated, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue,
       sum(seconds) AS n, sum(energy_mj) AS mj, sum(measured_mj) AS measured
FROM {rated}
GROUP BY site, gpu_model, stream, allocated, rent_price, rent_per_s, discount_pct, tariff_per_kwh, pue
"""
_CARDS_SQL = """
SELECT site, gpu_model, uniqExact(gpu_uuid) FROM {rated}
GROUP BY site, gpu_model
"""
# Per hour, the quantities per minute (sumMap adds the per-minute arrays of an hour's rows).
_RENT_BY_MINUTE_SQL = """
SELECT site, gpu_model, tenant, toUnixTimestamp(hour), sumMap(minutes, minute_qty)
FROM {rated}
WHERE stream = 'rent'
GROUP BY site, gpu_model, tenant, hour
"""
_ENERGY_BY_MINUTE_SQL = """
SELECT site, gpu_model, toUnixTimestamp(hour), sumMap(minutes, minute_qty)
FROM {rated}
WHERE stream = 'energy'
GROUP BY site, gpu_model, hour
"""


def _rated(db: Any, rules: Any, period: str, *, minutes: bool = False) -> tuple[str, dict]:
    """The period's rated data with every card's model filled in."""
    cov = coverage(db, rules, period)
    source, params = source_of(cov, rules, minutes=minutes)
    return _RATED.format(source=source, models=card_models_sql(cov)), params


def cost_share(db: Any, rules: Any, period: str) -> list[dict]:
    """One row per (site, gpu model) with money rounded once per row and column."""
    rules.period_bounds(period)
    rent: dict[tuple, Fraction] = defaultdict(Fraction)
    seconds: dict[tuple, int] = defaultdict(int)
    billed: dict[tuple, Fraction] = defaultdict(Fraction)
    idle: dict[tuple, Fraction] = defaultdict(Fraction)
    kwh: dict[tuple, Fraction] = defaultdict(Fraction)
    measured_mj: dict[tuple, int] = defaultdict(int)  # IT energy, before PUE
    estimated_mj: dict[tuple, int] = defaultdict(int)
    rated, params = _rated(db, rules, period)
    for site, model, stream, allocated, price, per_s, pct, tariff, pue, n, mj, measured in db.query(
            _GROUPS_SQL.format(rated=rated), params):
        key = (site, model)
        if stream == "rent":  # revenue after contract discounts
            seconds[key] += int(n)
            rent[key] += rent_amount(int(n), price, int(per_s), pct)
        else:
            kwh[key] += billed_kwh(int(mj), pue)
            (billed if allocated else idle)[key] += energy_amount(int(mj), pue, tariff)
            measured_mj[key] += int(measured)
            estimated_mj[key] += int(mj) - int(measured)
    cards = {(site, model): int(n) for site, model, n in db.query(_CARDS_SQL.format(rated=rated), params)}
    rows = []
    for key in sorted(set(cards) | set(rent) | set(kwh)):
        site, model = key
        green_share = Fraction(rules.site(site).green_share) if rules.has_site(site) else Fraction(0)
        electricity = billed[key] + idle[key]
        rows.append({
            "site": site,
            "gpu_model": model or "(unknown)",
            "cards": cards.get(key, 0),
            "rented_gpu_hours": round_quantity(gpu_hours(seconds[key])),
            "rent_revenue": round_fen(rent[key]),
            "electricity_billed": round_fen(billed[key]),
            "electricity_unallocated": round_fen(idle[key]),
            "electricity_share": _ratio(electricity, rent[key]),
            "green_kwh": round_quantity(kwh[key] * green_share),
            "total_kwh": round_quantity(kwh[key]),
            "measured_it_kwh": round_quantity(Fraction(measured_mj[key], MJ_PER_KWH)),
            "estimated_it_kwh": round_quantity(Fraction(estimated_mj[key], MJ_PER_KWH)),
        })
    return rows


def what_if(db: Any, rules: Any, period: str, actual: list[dict], *, other_site: str | None = None,
            other_rules: Any = None) -> list[dict]:
    """The period's recorded usage re-priced: energy at `other_site` and/or everything under
    `other_rules` (another rule set: catalog, contracts, tariffs), beside the actual rows.

    Usage is re-priced minute by minute with the rates in force at each minute, which is
    exact for rule changes and tariff bands on whole minutes (what the rule files express).
    saving = what-if (rent + electricity) − actual (rent + electricity): what this site and
    these rules save compared with the alternative.
    """
    pricing = other_rules or rules
    if other_site is not None and not pricing.has_site(other_site):
        raise UnknownSite(f"unknown site {other_site!r}; known: {', '.join(pricing.site_ids)}")
    rated, params = _rated(db, rules, period, minutes=True)
    cost: dict[tuple, Fraction] = defaultdict(Fraction)
    for site, model, hour, (minutes, quantities) in db.query(_ENERGY_BY_MINUTE_SQL.format(rated=rated), params):
        priced_at = other_site or site
        if not pricing.has_site(priced_at):
            raise UnknownSite(f"the what-if rules have no site {priced_at!r}; name one with --what-if-site")
        for minute, mj in zip(minutes, quantities):
            rate = pricing.energy_rate(priced_at, int(hour) + 60 * int(minute))
            cost[(site, model or "(unknown)")] += rate.cost(int(mj))
    rent: dict[tuple, Fraction] | None = None
    if other_rules is not None:
        rent = defaultdict(Fraction)
        for site, model, tenant, hour, (minutes, quantities) in db.query(_RENT_BY_MINUTE_SQL.format(rated=rated), params):
            for minute, n in zip(minutes, quantities):
                rate = other_rules.rent_rate(tenant, model, int(hour) + 60 * int(minute))
                rent[(site, model)] += rate.cost(int(n))
    rows = []
    for row in actual:
        key = (row["site"], row["gpu_model"])
        other_electricity = round_fen(cost.get(key, Fraction(0)))
        other_rent = round_fen(rent.get(key, Fraction(0))) if rent is not None else row["rent_revenue"]
        actual_total = row["rent_revenue"] + row["electricity_billed"] + row["electricity_unallocated"]
        rows.append({
            **row,
            "what_if_site": other_site or ("(other rules)" if other_rules is not None else row["site"]),
            "what_if_rent": other_rent,
            "what_if_electricity": other_electricity,
            "saving": other_rent + other_electricity - actual_total,
        })
    return rows


def store_cost_share(db: Any, period: str, rows: list[dict]) -> None:
    """Keep the period's cost share in ClickHouse for finance (latest computation wins)."""
    now = datetime.now(timezone.utc)
    columns = ("period", "site", "gpu_model", "cards", "rented_gpu_hours", "rent_revenue", "electricity_billed",
               "electricity_unallocated", "electricity_share", "green_kwh", "total_kwh", "computed_at")
    db.insert("cost_share", [(period, *(r[c] for c in columns[1:-1]), now) for r in rows], columns)


def _ratio(numerator: Fraction, denominator: Fraction) -> Decimal:
    if not denominator:
        return Decimal(0)
    value = numerator / denominator
    return (Decimal(value.numerator) / Decimal(value.denominator)).quantize(Decimal("0.000001"))
