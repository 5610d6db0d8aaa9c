"""The shape of the four rule files, as pydantic models (frozen, extra="forbid").

These models check types, required keys and ranges of single values. Checks that look
at several values at once (bands covering the day, versions in date order, contracts
naming catalog models) live in `billing_rules.loader`, which also turns every failure
into "<file>: <place>: <reason>".

TOML is parsed with `parse_float=Decimal`, so `price_per_kwh = 0.33` arrives here as
Decimal("0.33"), never as a float. Dates are TOML local dates (`2026-01-01`, unquoted);
an `effective_from` may also be a TOML local date-time (`2026-03-15T12:00:00`, no
offset: it is read in the entry's own time zone, the site's or the billing one).
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, StrictStr
from pydantic_core import PydanticCustomError

from schemas.ids import ID_PATTERN
from schemas.tables import RULE_VALUE_COLUMNS, decimal_digits


def stored_as(value_name: str, *, whole_only: bool = False) -> AfterValidator:
    """A check that a Decimal fits the database column RULE_VALUE_COLUMNS[value_name] stores it
    in: at most its scale of decimals (trailing zeros do not count: 1.2500000 is 1.25; not
    checked with `whole_only`, where the loader says it in its own words) and its precision
    less scale of digits before the point."""
    table, column = RULE_VALUE_COLUMNS[value_name]
    precision, scale = decimal_digits(column.type)
    where = f"{table}.{column.name} is {column.type}"

    def check(value: Decimal) -> Decimal:
        if not value.is_finite():  # refused by allow_inf_nan before this runs
            return value
        _, digits, exponent = value.as_tuple()
        digits = list(digits)
        while exponent < 0 and len(digits) > 1 and digits[-1] == 0:  # not normalize(): it rounds to 28 digits
            digits.pop()
            exponent += 1
        decimals = max(0, -exponent)
        whole = max(0, len(digits) + exponent) if any(digits) else 0
        if decimals > scale and not whole_only:
            raise PydanticCustomError("decimal_scale", "has {decimals} decimals, more than the database stores ({where})",
                                      {"decimals": decimals, "where": where})
        if whole > precision - scale:
            raise PydanticCustomError("decimal_whole", "is too large for the database: at most {whole} digits before "
                                      "the point ({where})", {"whole": precision - scale, "where": where})
        return value

    return AfterValidator(check)


Id = Annotated[StrictStr, Field(pattern=ID_PATTERN)]
Text = Annotated[StrictStr, Field(min_length=1, max_length=200)]
LocalDate = Annotated[date, Field(strict=True)]  # a TOML local date; a date-time is refused
Price = Annotated[Decimal, Field(ge=0, allow_inf_nan=False)]
RentPrice = Annotated[Price, stored_as("rent_price")]  # ¥ per card-month or card-hour
TariffPrice = Annotated[Price, stored_as("tariff_per_kwh")]  # ¥ per kWh
ClockTime = Annotated[StrictStr, Field(pattern=r"^([01]\d|2[0-4]):[0-5]\d$")]
Period = Annotated[StrictStr, Field(pattern=r"^\d{4}-(0[1-9]|1[0-2])$")]
# A tax id: the 统一社会信用代码 (18 characters) or another scheme's; letters, digits, '-' only.
TaxId = Annotated[StrictStr, Field(pattern=r"^[0-9A-Z][0-9A-Z-]{3,39}$")]


def _date_or_local_datetime(value: object) -> date | datetime:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise PydanticCustomError(
                "local_datetime", "must be a local date-time without a UTC offset (it is read in the entry's time zone)"
            )
        if value.microsecond:
            raise PydanticCustomError("whole_seconds", "must be a whole second (no fraction of a second)")
        return value
    if isinstance(value, date):
        return value
    raise PydanticCustomError(
        "date_type", "input should be a valid date or local date-time, unquoted (2026-03-15 or 2026-03-15T12:00:00)"
    )


# A TOML local date (in force from 00:00) or local date-time (from that wall-clock time).
EffectiveFrom = Annotated[date | datetime, PlainValidator(_date_or_local_datetime)]


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# billing.toml -------------------------------------------------------------------------


class VatVersion(_Entry):
    effective_from: LocalDate  # first day of a billing period
    rate: Annotated[Decimal, Field(ge=0, lt=1, allow_inf_nan=False), stored_as("vat_rate")]


class CreditEntry(_Entry):
    id: Id
    amount: Annotated[Decimal, Field(gt=0, allow_inf_nan=False), stored_as("credit_amount", whole_only=True)]
    reason: Text
    reason_zh: Text | None = None  # the reason on zh-CN documents
    expires_period: Period | None = None  # last period in which it may be used


class SellerEntry(_Entry):
    """Who issues the invoices: printed on every invoice and credit note, the brand on every page."""

    brand: Text  # the name customers know: page title, document headers
    legal_name: Text
    address: Text
    tax_id: TaxId  # e.g. the 18-character 统一社会信用代码 (unified social credit code)
    contact: Text  # e-mail or phone for billing questions
    bank: Text | None = None  # the bank and branch payments go to
    bank_account: Annotated[StrictStr, Field(pattern=r"^[0-9A-Z][0-9A-Z -]{3,39}$")] | None = None
    brand_zh: Text | None = None  # the zh-CN variants; the English text is used where one is absent
    legal_name_zh: Text | None = None
    address_zh: Text | None = None
    bank_zh: Text | None = None


DunningDay = Annotated[int, Field(strict=True, ge=1, le=365)]  # days past an invoice's due date


class DunningEntry(_Entry):
    """`[dunning]`: the billing events sent while an invoice stays unpaid past its due date
    (billing_rules/dunning.py). Days in increasing order, each once (the loader checks)."""

    overdue_days: Annotated[list[DunningDay], Field(min_length=1, max_length=10)]  # an invoice_overdue at each
    suspend_new_rentals_days: DunningDay | None = None  # a suspend_new_rentals (never to a prepaid tenant)


class BillingFile(_Entry):
    billing_timezone: StrictStr
    grace_period: StrictStr  # ISO 8601 duration: "P3D", "PT36H", "P1DT12H"
    vat: Annotated[list[VatVersion], Field(min_length=1)]
    new_tenant_credit: list[CreditEntry] = []
    payment_terms_days: Annotated[int, Field(strict=True, ge=0, le=365)] = 15  # due date = issue date + this
    # "auto": `invoice run` issues at once (the scheduler after grace_period); "manual": it makes
    # drafts that `gpubill invoice issue` issues after review (billing/invoicing.py)
    review: Literal["auto", "manual"] = "auto"
    seller: SellerEntry | None = None  # without one, documents say the seller is not configured
    dunning: DunningEntry | None = None  # without one, no dunning events are sent


# sites.toml ---------------------------------------------------------------------------


class Band(_Entry):
    name: Id
    name_zh: Text | None = None  # the band's name on zh-CN documents (default: reports/render/i18n.py's words)
    start: ClockTime  # local wall-clock time, inclusive
    end: ClockTime  # local wall-clock time, exclusive; "24:00" is the end of the day
    price_per_kwh: TariffPrice


BandList = Annotated[list[Band], Field(min_length=1)]


class TariffVersion(_Entry):
    effective_from: EffectiveFrom  # local date or date-time at the site
    bands: BandList  # every day, unless a calendar below says otherwise
    weekend_bands: BandList | None = None  # Saturday and Sunday (local)
    holidays: list[LocalDate] = []  # local dates priced with holiday_bands
    holiday_bands: BandList | None = None  # default: weekend_bands, else bands


class PueVersion(_Entry):
    effective_from: EffectiveFrom  # local date or date-time at the site
    pue: Annotated[Decimal, Field(allow_inf_nan=False), stored_as("pue")]


class SiteEntry(_Entry):
    name: Text
    name_zh: Text | None = None  # the site's name on zh-CN documents
    timezone: StrictStr
    green_share: Annotated[Decimal, Field(ge=0, le=1, allow_inf_nan=False)]
    tariff_cap_per_kwh: TariffPrice | None = None
    pue: Annotated[list[PueVersion], Field(min_length=1)]
    tariff: Annotated[list[TariffVersion], Field(min_length=1)]


class SitesFile(_Entry):
    site: Annotated[dict[Id, SiteEntry], Field(min_length=1)]


# catalog.toml -------------------------------------------------------------------------


class PriceVersion(_Entry):
    effective_from: EffectiveFrom  # local date or date-time in the billing time zone
    monthly: RentPrice  # ¥ per card per calendar month
    hourly: RentPrice  # ¥ per card-hour, on demand


class ModelEntry(_Entry):
    name: Text
    price: list[PriceVersion] = []  # empty is reported by the loader as "no price"


class CatalogFile(_Entry):
    model: Annotated[dict[Id, ModelEntry], Field(min_length=1)]


# contracts.toml -----------------------------------------------------------------------


class RentTerm(_Entry):
    gpu_model: Id
    effective_from: EffectiveFrom  # local date or date-time in the billing time zone
    plan: Literal["monthly", "hourly"]
    discount_pct: Annotated[Decimal, Field(ge=0, le=100, allow_inf_nan=False), stored_as("discount_pct")] = Decimal(0)


class TenantEntry(_Entry):
    rent: list[RentTerm] = []
    credit: list[CreditEntry] = []


class ContractsFile(_Entry):
    tenant: dict[Id, TenantEntry] = {}
