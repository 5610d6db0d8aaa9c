"""`RuleSet`: an immutable, validated snapshot of the rule files, and what it answers.

Every lookup takes a UTC epoch second and answers with the rule version in force at
that second: catalog prices, contracts and VAT by the local date in the billing time
zone; PUE and tariffs by the local date and wall-clock time at the site. Results are
small frozen value objects; lookups are cached per (key, local day), so pricing one
reading costs a `datetime.fromtimestamp` and a dict hit.

Build one with `billing_rules.load_rules`; a RuleSet is never half-built.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

from billing_rules import periods
from billing_rules.errors import NoRuleInForce, UnknownModel, UnknownSite
from billing_rules.files import BillingFile, CatalogFile, ContractsFile, SitesFile
from billing_rules.money import MJ_PER_KWH, S_PER_HOUR

Plan = Literal["monthly", "hourly"]

_CACHE_LIMIT = 200_000  # entries per lookup cache before it is cleared (bounded memory)


@dataclass(frozen=True, slots=True)
class SiteInfo:
    """What a site is; its PUE and tariff vary over time and come from `RuleSet.energy_rate`."""

    id: str
    name: str
    timezone: str
    green_share: Decimal  # fraction of the site's energy that is green, 0..1
    tariff_cap_per_kwh: Decimal | None  # policy cap the tariffs were checked against, if any


@dataclass(frozen=True, slots=True)
class RentRate:
    """The rent of one GPU-second: exactly `price / per_s` yuan.

    `price` is the monthly rent (plan "monthly", `per_s` = seconds in that calendar month
    in the billing time zone) or the hourly rate (plan "hourly", `per_s` = 3600), with the
    contract's discount already applied. `list_price` and `discount_pct` say where it came
    from: price = list_price × (100 − discount_pct) / 100.
    """

    plan: Plan
    price: Decimal
    per_s: int
    list_price: Decimal
    discount_pct: Decimal

    @property
    def per_second(self) -> Fraction:
        """Yuan per GPU-second, exact."""
        return Fraction(self.price) / self.per_s

    @property
    def unit_price_per_hour(self) -> Fraction:
        """Yuan per GPU-hour, exact: price × 3600 / per_s."""
        return Fraction(self.price) * S_PER_HOUR / self.per_s


@dataclass(frozen=True, slots=True)
class EnergyRate:
    """The electricity price of a second at a site: IT energy × pue × tariff."""

    band: str
    tariff_per_kwh: Decimal
    pue: Decimal

    def billed_kwh(self, energy_mj: int) -> Fraction:
        """Billed (facility) kWh of `energy_mj` millijoules of IT energy, exact."""
        return Fraction(energy_mj) * Fraction(self.pue) / MJ_PER_KWH

    def cost(self, energy_mj: int) -> Fraction:
        """Yuan for `energy_mj` millijoules of IT energy, exact: E × pue × tariff / 3.6e9."""
        return Fraction(energy_mj) * Fraction(self.pue) * Fraction(self.tariff_per_kwh) / MJ_PER_KWH


@dataclass(frozen=True, slots=True)
class CreditGrant:
    """A credit a tenant may spend against invoices; `expires_period` is the last usable period."""

    id: str
    amount: Decimal
    reason: str
    expires_period: str | None


@dataclass(frozen=True, slots=True)
class _Versions:
    """Versions of one entry: `days[i]` (proleptic ordinal of effective_from) starts `values[i]`."""

    days: tuple[int, ...]
    values: tuple[Any, ...]

    def at(self, day: int) -> Any | None:
        i = bisect_right(self.days, day) - 1
        return self.values[i] if i >= 0 else None

    @property
    def first(self) -> date:
        return date.fromordinal(self.days[0])


@dataclass(frozen=True, slots=True)
class _Site:
    info: SiteInfo
    tz: ZoneInfo
    pue: _Versions  # of Decimal
    tariff: _Versions  # of (band start minutes, band names, prices)


class RuleSet:
    """An immutable, validated rule set. See the module docstring; build with `load_rules`."""

    __slots__ = (
        "source", "digest", "_billing_tz", "_grace", "_vat_periods", "_vat_rates", "_sites", "_prices",
        "_contracts", "_new_tenant_credits", "_tenant_credits", "_rent_cache", "_energy_cache",
    )  # fmt: skip

    def __init__(
        self,
        *,
        source: Path,
        digest: str,
        billing: BillingFile,
        grace_period: timedelta,
        sites: SitesFile,
        catalog: CatalogFile,
        contracts: ContractsFile,
    ) -> None:
        """Index already validated files; called by the loader only."""
        terms: dict[tuple[str, str], list] = {}  # (tenant, gpu_model) -> [(effective_from, term)]
        for tenant, entry in contracts.tenant.items():
            for term in entry.rent:
                terms.setdefault((tenant, term.gpu_model), []).append((term.effective_from, term))
        fields = {
            "source": source,
            "digest": digest,  # sha256 of the rule files, to record with what was priced
            "_billing_tz": ZoneInfo(billing.billing_timezone),
            "_grace": grace_period,
            "_vat_periods": tuple(f"{v.effective_from:%Y-%m}" for v in billing.vat),
            "_vat_rates": tuple(v.rate for v in billing.vat),
            "_sites": {site_id: _index_site(site_id, entry) for site_id, entry in sorted(sites.site.items())},
            "_prices": {
                model_id: _versions((p.effective_from, p) for p in entry.price)
                for model_id, entry in sorted(catalog.model.items())
            },
            "_contracts": {key: _versions(items) for key, items in terms.items()},
            "_new_tenant_credits": tuple(_grant(c) for c in billing.new_tenant_credit),
            "_tenant_credits": {tenant: tuple(_grant(c) for c in e.credit) for tenant, e in contracts.tenant.items()},
            "_rent_cache": {},  # (tenant, gpu_model, local day ordinal) -> RentRate
            "_energy_cache": {},  # (site, local day ordinal) -> (band start minutes, EnergyRate per band)
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("RuleSet is immutable; load a new one with load_rules()")

    def __repr__(self) -> str:
        return f"RuleSet(source={str(self.source)!r}, digest={self.digest[:12]!r})"

    # billing calendar -----------------------------------------------------------------

    @property
    def billing_tz(self) -> ZoneInfo:
        return self._billing_tz

    @property
    def grace_period(self) -> timedelta:
        """How long after a period ends the monthly run waits for late data."""
        return self._grace

    def period_of(self, second: int) -> str:
        """"YYYY-MM" of UTC epoch `second` in the billing time zone."""
        return periods.period_of(second, self._billing_tz)

    def period_bounds(self, period: str) -> tuple[int, int]:
        """[start, end) of `period` in UTC epoch seconds."""
        return periods.period_bounds(period, self._billing_tz)

    def next_period(self, period: str) -> str:
        return periods.next_period(period)

    def vat_rate(self, period: str) -> Decimal:
        """VAT rate in force for invoices of `period` (e.g. Decimal("0.06"))."""
        periods.parse_period(period)
        i = bisect_right(self._vat_periods, period) - 1
        if i < 0:
            raise NoRuleInForce(f"billing.toml has no VAT rate before {self._vat_periods[0]} (asked for {period})")
        return self._vat_rates[i]

    # what exists ----------------------------------------------------------------------

    def has_site(self, site_id: str) -> bool:
        return site_id in self._sites

    def has_model(self, gpu_model: str) -> bool:
        return gpu_model in self._prices

    @property
    def site_ids(self) -> tuple[str, ...]:
        return tuple(self._sites)

    @property
    def model_ids(self) -> tuple[str, ...]:
        return tuple(self._prices)

    def site(self, site_id: str) -> SiteInfo:
        return self._site(site_id).info

    # prices ---------------------------------------------------------------------------

    def rent_rate(self, tenant: str, gpu_model: str, second: int) -> RentRate:
        """Rent of one GPU-second of `gpu_model` for `tenant` at UTC epoch `second`.

        The plan is the tenant's contract for that model in force that day, or "hourly"
        without one. Raises UnknownModel, or NoRuleInForce before the model's first price.
        """
        local = datetime.fromtimestamp(second, self._billing_tz)
        key = (tenant, gpu_model, local.toordinal())
        rate = self._rent_cache.get(key)
        if rate is None:
            rate = self._rent_rate_on(tenant, gpu_model, local.date())
            if len(self._rent_cache) >= _CACHE_LIMIT:
                self._rent_cache.clear()
            self._rent_cache[key] = rate
        return rate

    def energy_rate(self, site: str, second: int) -> EnergyRate:
        """PUE and tariff band at `site` for UTC epoch `second` (site-local date and time).

        Raises UnknownSite, or NoRuleInForce before the site's first PUE or tariff.
        """
        entry = self._site(site)
        local = datetime.fromtimestamp(second, entry.tz)
        key = (site, local.toordinal())
        day = self._energy_cache.get(key)
        if day is None:
            day = self._energy_day(site, entry, local.toordinal())
            if len(self._energy_cache) >= _CACHE_LIMIT:
                self._energy_cache.clear()
            self._energy_cache[key] = day
        starts, rates = day
        return rates[bisect_right(starts, local.hour * 60 + local.minute) - 1]

    def credit_grants(self, tenant: str) -> tuple[CreditGrant, ...]:
        """Every credit `tenant` has been granted: the new-tenant credits, then its contract's."""
        return self._new_tenant_credits + self._tenant_credits.get(tenant, ())

    # internals ------------------------------------------------------------------------

    def _site(self, site_id: str) -> _Site:
        try:
            return self._sites[site_id]
        except KeyError:
            raise UnknownSite(f"unknown site {site_id!r} (sites.toml has {', '.join(self._sites)})") from None

    def _rent_rate_on(self, tenant: str, gpu_model: str, day: date) -> RentRate:
        prices = self._prices.get(gpu_model)
        if prices is None:
            raise UnknownModel(f"unknown GPU model {gpu_model!r} (catalog.toml has {', '.join(self._prices)})")
        price = prices.at(day.toordinal())
        if price is None:
            raise NoRuleInForce(f"catalog.toml has no price for {gpu_model} before {prices.first} (asked for {day})")
        contract = self._contracts.get((tenant, gpu_model))
        term = contract.at(day.toordinal()) if contract is not None else None
        plan: Plan = term.plan if term is not None else "hourly"
        discount_pct = term.discount_pct if term is not None else Decimal(0)
        if plan == "monthly":
            list_price = price.monthly
            start, end = self.period_bounds(periods.format_period(day.year, day.month))
            per_s = end - start
        else:
            list_price = price.hourly
            per_s = S_PER_HOUR
        charged = list_price if not discount_pct else list_price * (100 - discount_pct) / 100
        return RentRate(plan=plan, price=charged, per_s=per_s, list_price=list_price, discount_pct=discount_pct)

    def _energy_day(self, site_id: str, entry: _Site, day: int) -> tuple[tuple[int, ...], tuple[EnergyRate, ...]]:
        pue = entry.pue.at(day)
        tariff = entry.tariff.at(day)
        if pue is None or tariff is None:
            first = max(entry.pue.first, entry.tariff.first)
            asked = date.fromordinal(day)
            raise NoRuleInForce(f"sites.toml has no PUE and tariff for site {site_id} before {first} (asked for {asked})")
        starts, names, prices = tariff
        return starts, tuple(EnergyRate(band=n, tariff_per_kwh=p, pue=pue) for n, p in zip(names, prices))


def _versions(items: Any) -> _Versions:
    pairs = list(items)
    return _Versions(days=tuple(d.toordinal() for d, _ in pairs), values=tuple(v for _, v in pairs))


def minutes_of(clock: str) -> int:
    """Minutes after local midnight of "HH:MM" ("24:00" is 1440)."""
    hours, minutes = clock.split(":")
    return int(hours) * 60 + int(minutes)


def _index_site(site_id: str, entry: Any) -> _Site:
    info = SiteInfo(
        id=site_id,
        name=entry.name,
        timezone=entry.timezone,
        green_share=entry.green_share,
        tariff_cap_per_kwh=entry.tariff_cap_per_kwh,
    )
    tariffs = []
    for version in entry.tariff:
        bands = sorted(version.bands, key=lambda b: minutes_of(b.start))
        value = (
            tuple(minutes_of(b.start) for b in bands),
            tuple(b.name for b in bands),
            tuple(b.price_per_kwh for b in bands),
        )
        tariffs.append((version.effective_from, value))
    return _Site(
        info=info,
        tz=ZoneInfo(entry.timezone),
        pue=_versions((v.effective_from, v.pue) for v in entry.pue),
        tariff=_versions(tariffs),
    )


def _grant(entry: Any) -> CreditGrant:
    return CreditGrant(id=entry.id, amount=entry.amount, reason=entry.reason, expires_period=entry.expires_period)
