"""A customer's usage report (SPEC §6) as data: per day, instance and GPU, for one tenant.

`reports.usage_report` builds it from rated_seconds; `reports.render.usage` writes it as
CSV, JSON, Parquet or PDF. Rows carry figures already rounded once per row (money to the
fen, GPU-hours and kWh to six decimals); totals are exact sums of the rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

__all__ = ["UsageReport", "UsageRow", "UsageTotals"]


@dataclass(frozen=True)
class UsageRow:
    """One day × instance × GPU. Money in CNY rounded to the fen; kWh after PUE."""

    day: str  # "2026-03-05", in the billing time zone
    instance: str  # "" when the GPU ran without an instance
    gpu_uuid: str
    gpu_model: str
    gpu_hours: Decimal
    avg_util_pct: Decimal
    kwh: Decimal
    rent: Decimal
    electricity: Decimal


@dataclass(frozen=True)
class UsageTotals:
    gpu_hours: Decimal
    kwh: Decimal
    rent: Decimal
    electricity: Decimal

    @property
    def amount(self) -> Decimal:
        """Rent plus electricity, before credits and VAT."""
        return self.rent + self.electricity


@dataclass(frozen=True)
class UsageReport:
    tenant: str
    period: str  # "2026-03"
    generated_at: str  # RFC3339
    rows: tuple[UsageRow, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))

    @property
    def totals(self) -> UsageTotals:
        """Exact Decimal sums of the rows (rent and electricity are sums of fen amounts)."""
        return UsageTotals(
            gpu_hours=sum((r.gpu_hours for r in self.rows), Decimal(0)),
            kwh=sum((r.kwh for r in self.rows), Decimal(0)),
            rent=sum((r.rent for r in self.rows), Decimal(0)),
            electricity=sum((r.electricity for r in self.rows), Decimal(0)),
        )
