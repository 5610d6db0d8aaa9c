"""A customer's usage report (SPEC §6) as data: per day (or hour), instance and GPU, for one tenant.

`reports.usage_report` builds it from the rated data; `reports.render.usage` writes it as
CSV, JSON, Parquet or PDF. `lines` are the invoice's charge lines for the same usage (rent,
discount, electricity, before credits and VAT: built by `billing_rules.build_invoice`);
rows carry figures shared out of those lines' totals (money to the fen, GPU-hours and kWh
to six decimals, each within one unit of its exact value), so the totals — exact sums of
the rows — equal the invoice's lines to the fen and to 1e-6 GPU-hour and kWh.

Granularity ``"day"`` (the default) has one row per day × instance × GPU and ``hour == ""``;
``"hour"`` has one row per hour × instance × GPU, the hour named by its start in the
billing time zone as RFC 3339 with the zone's offset, ``"2026-03-05T14:00:00+08:00"``, and
``day`` the date of that start (``"2026-03-05"``). The report's ``time_zone`` names the
zone (``"Asia/Shanghai"``).

Energy is graded (SPEC §4): ``kwh`` is billed energy (after PUE), as on the invoice;
``measured_it_kwh`` and ``estimated_it_kwh`` split the row's IT energy (before PUE) into what
the cards' energy counters measured and what was estimated from power readings (six decimals,
shared out of each grade's total so the rows add up to it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from billing_rules import InvoiceLine, Seller

__all__ = ["GRANULARITIES", "UsageReport", "UsageRow", "UsageTotals"]

GRANULARITIES = ("day", "hour")


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
    hour: str = ""  # hourly reports: "2026-03-05T14:00:00+08:00" (start, billing time zone); "" per day
    measured_it_kwh: Decimal = Decimal(0)  # IT energy (before PUE) from the cards' counters
    estimated_it_kwh: Decimal = Decimal(0)  # IT energy (before PUE) estimated from power_w


@dataclass(frozen=True)
class UsageTotals:
    gpu_hours: Decimal
    kwh: Decimal
    rent: Decimal
    electricity: Decimal
    measured_it_kwh: Decimal = Decimal(0)
    estimated_it_kwh: Decimal = Decimal(0)

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
    granularity: str = "day"  # GRANULARITIES
    time_zone: str = ""  # the billing time zone the days and hours are in, e.g. "Asia/Shanghai"
    lines: tuple[InvoiceLine, ...] = ()  # the invoice's rent, discount and electricity lines for these rows
    seller: Seller | None = None  # billing.toml [seller]: whose report it is (its brand heads the PDF)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", tuple(self.rows))
        object.__setattr__(self, "lines", tuple(self.lines))
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"unknown granularity {self.granularity!r}; use one of: {', '.join(GRANULARITIES)}")

    @property
    def totals(self) -> UsageTotals:
        """Exact Decimal sums of the rows (rent and electricity are sums of fen amounts)."""
        return UsageTotals(
            gpu_hours=sum((r.gpu_hours for r in self.rows), Decimal(0)),
            kwh=sum((r.kwh for r in self.rows), Decimal(0)),
            rent=sum((r.rent for r in self.rows), Decimal(0)),
            electricity=sum((r.electricity for r in self.rows), Decimal(0)),
            measured_it_kwh=sum((r.measured_it_kwh for r in self.rows), Decimal(0)),
            estimated_it_kwh=sum((r.estimated_it_kwh for r in self.rows), Decimal(0)),
        )
