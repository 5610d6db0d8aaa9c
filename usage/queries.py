"""SQL over the rated data, shared by invoices and late-data adjustments.

Builders are pure functions of a source relation (`usage.rated.rated_source`: rolled-up
hours plus the per-second rows of hours not rolled up yet) returning SQL text, so they can
be read and tested on their own.
"""

from __future__ import annotations


def rent_usage_sql(source: str) -> str:
    """Rented seconds per (tenant, model, plan, price terms)."""
    return (
        "SELECT tenant, gpu_model, plan, rent_price, rent_per_s, discount_pct, sum(seconds) AS seconds "
        f"FROM {source} WHERE stream = 'rent' "
        "GROUP BY tenant, gpu_model, plan, rent_price, rent_per_s, discount_pct "
        "ORDER BY tenant, gpu_model, plan, rent_price, discount_pct"
    )


def energy_usage_sql(source: str) -> str:
    """Allocated IT energy per (tenant, site, band, tariff, PUE)."""
    return (
        "SELECT tenant, site, band, tariff_per_kwh, pue, sum(energy_mj) AS energy_mj "
        f"FROM {source} WHERE stream = 'energy' AND tenant != '' "
        "GROUP BY tenant, site, band, tariff_per_kwh, pue ORDER BY tenant, site, band, tariff_per_kwh"
    )


def tenants_with_charges_sql(source: str) -> str:
    return f"SELECT DISTINCT tenant FROM {source} WHERE tenant != '' ORDER BY tenant"
