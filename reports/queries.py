"""SQL over rated_seconds, shared by invoices, cost share and usage reports.

Builders are pure functions returning (sql, parameters), so they can be read and tested
on their own; every read uses FINAL so that re-written rows (idempotent re-inserts, late
usage joining earlier power) count once, in their latest version.
"""

from __future__ import annotations


def rent_usage_sql(period: str, tenant: str | None = None) -> tuple[str, dict]:
    """Rented seconds per (tenant, model, plan, price terms) in a period."""
    where = "stream = 'rent' AND period = {period:String}" + (" AND tenant = {tenant:String}" if tenant else "")
    sql = (
        "SELECT tenant, gpu_model, plan, rent_price, rent_per_s, discount_pct, count() AS seconds "
        f"FROM rated_seconds FINAL WHERE {where} "
        "GROUP BY tenant, gpu_model, plan, rent_price, rent_per_s, discount_pct "
        "ORDER BY tenant, gpu_model, plan, rent_price, discount_pct"
    )
    return sql, {"period": period, "tenant": tenant or ""}


def energy_usage_sql(period: str, tenant: str | None = None) -> tuple[str, dict]:
    """Allocated IT energy per (tenant, site, band, tariff, PUE) in a period."""
    where = "stream = 'energy' AND tenant != '' AND period = {period:String}" + (
        " AND tenant = {tenant:String}" if tenant else ""
    )
    sql = (
        "SELECT tenant, site, band, tariff_per_kwh, pue, sum(energy_mj) AS energy_mj "
        f"FROM rated_seconds FINAL WHERE {where} "
        "GROUP BY tenant, site, band, tariff_per_kwh, pue ORDER BY tenant, site, band, tariff_per_kwh"
    )
    return sql, {"period": period, "tenant": tenant or ""}


def tenants_with_charges_sql(period: str) -> tuple[str, dict]:
    return (
        "SELECT DISTINCT tenant FROM rated_seconds FINAL WHERE period = {period:String} AND tenant != '' ORDER BY tenant",
        {"period": period},
    )
