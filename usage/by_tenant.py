"""Rated usage per tenant, as the pricing in billing_rules takes it: rent seconds per
(model, plan, price) and allocated energy per (site, band, tariff, PUE).

Read from a `usage.rated` source (rows and rollups, exactly); both the invoice run
(billing/invoicing.py) and the register's unregistered-usage list (billing/tenants.py) read
usage through here, so they read it the same way.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from billing_rules import EnergyUsage, RentUsage
from usage.queries import energy_usage_sql, rent_usage_sql


def usage_by_tenant(db: Any, source: tuple[str, dict]) -> tuple[dict[str, list[RentUsage]], dict[str, list[EnergyUsage]]]:
    """Rent and allocated energy per tenant in `source` (a usage.rated source)."""
    relation, params = source
    rent: dict[str, list[RentUsage]] = defaultdict(list)
    for t, model, plan, price, per_s, discount_pct, seconds in db.query(rent_usage_sql(relation), params):
        rent[t].append(RentUsage(gpu_model=model, plan=plan, price=plain(price), per_s=int(per_s),
                                 seconds=int(seconds), discount_pct=plain(discount_pct)))
    energy: dict[str, list[EnergyUsage]] = defaultdict(list)
    for t, site, band, tariff, pue, mj in db.query(energy_usage_sql(relation), params):
        energy[t].append(EnergyUsage(site=site, band=band, tariff_per_kwh=plain(tariff), pue=plain(pue), energy_mj=int(mj)))
    return rent, energy


def plain(value: Decimal) -> Decimal:
    """Drop the trailing zeros of a ClickHouse column's scale (1.1200 → 1.12), keep integers whole."""
    value = value.normalize()
    return value.quantize(Decimal(1)) if value == value.to_integral_value() else value
