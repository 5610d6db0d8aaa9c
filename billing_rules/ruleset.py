"""`RuleSet`: an immutable, validated snapshot of the rule files, and what it answers.

Every lookup takes a UTC epoch second and answers with the rule version in force at
that instant: catalog prices and contracts by local time in the billing time zone
(VAT by billing period); PUE and tariffs by local date and wall-clock time at the site.
A version takes effect at 00:00 of its `effective_from` date, or at the local time of a
date-time `effective_from` (`2026-03-15T12:00:00`).

Two ways to ask:
- per second: `rent_rate`, `energy_rate` (streams call these once per reading);
- per interval: `rent_segments`, `energy_segments` split [start, end) into maximal
  pieces of constant rate (`gpubill bench month` writes a month's rated rows from them).

Both come from one computation (`_rent_pieces`, `_energy_pieces`): collect the instants
where a rate may change (`billing_rules.timeline`), evaluate the rate at each, merge
equal neighbours. Per-second lookups cache those pieces per (key, UTC day): a lookup is
a dict hit and, on a day that contains a change, a bisect over the day's change points.

The answers are the values of `billing_rules.rates` (RentRate, EnergyRate, SiteInfo,
CreditGrant), whose amounts are the formulas of `billing_rules.pricing`.

Build one with `billing_rules.load_rules`; a RuleSet is never half-built.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from billing_rules import periods
from billing_rules.dunning import DunningPolicy
from billing_rules.errors import NoRuleInForce, UnknownModel, UnknownSite
from billing_rules.files import BillingFile, CatalogFile, ContractsFile, SitesFile
from billing_rules.parties import Seller
from billing_rules.pricing import S_PER_HOUR, discounted_price
from billing_rules.rates import CreditGrant, EnergyRate, Plan, RentRate, SiteInfo
from billing_rules.timeline import Tariff, Versions, local_days, wall_clock_instants

__all__ = ["RuleSet"]

_CACHE_LIMIT = 200_000  # entries per lookup cache before it is cleared (bounded memory)
_DAY_S = 86_400  # cache bucket: one UTC day of epoch seconds

Pieces = tuple[tuple[int, ...], tuple[Any, ...]]  # (start of each piece, rate or None) over an interval


@dataclass(frozen=True, slots=True)
class _Site:
    info: SiteInfo
    tz: ZoneInfo
    pue: Versions  # of Decimal
    tariff: Versions  # of Tariff


class RuleSet:
    """An immutable, validated rule set. See the module docstring; build with `load_rules`."""

    __slots__ = (
        "source", "digest", "_billing_tz", "_grace", "_vat_periods", "_vat_rates", "_sites", "_prices",
        "_contracts", "_new_tenant_credits", "_tenant_credits", "_rent_cache", "_energy_cache", "_rates",
        "_seller", "_payment_terms_days", "_names_zh", "_review", "_dunning",
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
        billing_tz = ZoneInfo(billing.billing_timezone)
        terms: dict[tuple[str, str], list] = {}  # (tenant, gpu_model) -> [(effective_from, term)]
        for tenant, entry in contracts.tenant.items():
            for term in entry.rent:
                terms.setdefault((tenant, term.gpu_model), []).append((term.effective_from, term))
        fields = {
            "source": source,
            "digest": digest,  # sha256 of the rule files, to record with what was priced
            "_billing_tz": billing_tz,
            "_grace": grace_period,
            "_vat_periods": tuple(f"{v.effective_from:%Y-%m}" for v in billing.vat),
            "_vat_rates": tuple(v.rate for v in billing.vat),
            "_sites": {site_id: _index_site(site_id, entry) for site_id, entry in sorted(sites.site.items())},
            "_prices": {
                model_id: Versions.of(((p.effective_from, p) for p in entry.price), billing_tz)
                for model_id, entry in sorted(catalog.model.items())
            },
            "_contracts": {key: Versions.of(items, billing_tz) for key, items in terms.items()},
            "_new_tenant_credits": tuple(_grant(c) for c in billing.new_tenant_credit),
            "_tenant_credits": {tenant: tuple(_grant(c) for c in e.credit) for tenant, e in contracts.tenant.items()},
            "_rent_cache": {},  # (tenant, gpu_model, UTC day) -> Pieces of RentRate over that day
            "_energy_cache": {},  # (site, UTC day) -> Pieces of EnergyRate over that day
            "_rates": {},  # interned rate objects: equal rates are one object
            "_seller": Seller.of(billing.seller) if billing.seller is not None else None,
            "_payment_terms_days": billing.payment_terms_days,
            "_names_zh": _names_zh(billing, sites, contracts),
            "_review": billing.review,
            "_dunning": DunningPolicy.of(billing.dunning) if billing.dunning is not None else None,
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("RuleSet is immutable; load a new one with load_rules()")

    @property
    def revision(self) -> str:
        """The rule set's revision: the first 12 hex digits of `digest` (sha256 of the rule files'
        bytes), recorded on every invoice it priced and shown by `gpubill rules check`."""
        return self.digest[:12]

    def __repr__(self) -> str:
        return f"RuleSet(source={str(self.source)!r}, digest={self.digest[:12]!r})"

    # documents -------------------------------------------------------------------------

    @property
    def seller(self) -> Seller | None:
        """billing.toml's `[seller]`: who issues the invoices; None when the rules name none."""
        return self._seller

    @property
    def payment_terms_days(self) -> int:
        """Days from an invoice's issue date (billing time zone) to its due date."""
        return self._payment_terms_days

    @property
    def review(self) -> str:
        """billing.toml's `review`: "auto" (an invoice run issues) or "manual" (it makes drafts)."""
        return self._review

    @property
    def dunning(self) -> DunningPolicy | None:
        """billing.toml's `[dunning]` (billing_rules/dunning.py); None when the rules send no dunning events."""
        return self._dunning

    def name_zh(self, kind: str, key: str) -> str | None:
        """The zh-CN name the rule files give a `kind` ("site", "band" or "credit") named `key`
        (a site id, "site/band", a credit grant id); None where they give none."""
        return self._names_zh.get((kind, key))

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

    def credit_grants(self, tenant: str, *, new_tenant: bool) -> tuple[CreditGrant, ...]:
        """Every credit `tenant` has been granted: billing.toml's new-tenant credits when
        `new_tenant` (the caller decides who qualifies: billing/tenants.py, registered and
        active), then its contract's in contracts.toml, which an explicit contract grants
        whatever the registry says. Keyword and required, so no caller grants the trial credit
        to every id by default.
        """
        trial = self._new_tenant_credits if new_tenant else ()
        return trial + self._tenant_credits.get(tenant, ())

    # prices of one second ---------------------------------------------------------------

    def rent_rate(self, tenant: str, gpu_model: str, second: int) -> RentRate:
        """Rent of one GPU-second of `gpu_model` for `tenant` at UTC epoch `second`.

        The plan is the tenant's contract for that model in force at that instant, or
        "hourly" without one. Raises UnknownModel, or NoRuleInForce before the model's
        first price.
        """
        day = second // _DAY_S
        pieces = self._rent_cache.get((tenant, gpu_model, day))
        if pieces is None:
            pieces = self._rent_pieces(tenant, gpu_model, day * _DAY_S, day * _DAY_S + _DAY_S)
            if len(self._rent_cache) >= _CACHE_LIMIT:
                self._rent_cache.clear()
            self._rent_cache[tenant, gpu_model, day] = pieces
        starts, rates = pieces
        rate = rates[0] if len(starts) == 1 else rates[bisect_right(starts, second) - 1]
        if rate is None:
            raise self._no_price(gpu_model, second)
        return rate

    def energy_rate(self, site: str, second: int) -> EnergyRate:
        """PUE and tariff band at `site` for UTC epoch `second` (site-local date and time).

        Raises UnknownSite, or NoRuleInForce before the site's first PUE or tariff.
        """
        day = second // _DAY_S
        pieces = self._energy_cache.get((site, day))
        if pieces is None:
            pieces = self._energy_pieces(site, day * _DAY_S, day * _DAY_S + _DAY_S)
            if len(self._energy_cache) >= _CACHE_LIMIT:
                self._energy_cache.clear()
            self._energy_cache[site, day] = pieces
        starts, rates = pieces
        rate = rates[0] if len(starts) == 1 else rates[bisect_right(starts, second) - 1]
        if rate is None:
            raise self._no_energy_rule(site, second)
        return rate

    # prices of an interval ----------------------------------------------------------------

    def rent_segments(self, tenant: str, gpu_model: str, start_s: int, end_s: int) -> list[tuple[int, int, RentRate]]:
        """[start_s, end_s) as maximal (start, end, rate) pieces of constant rent rate.

        Pieces also end at every billing-period edge (each period is its own invoice,
        and a monthly plan's `per_s` changes there), so no piece straddles two periods.
        They cover [start_s, end_s) exactly, in order; empty when end_s == start_s.
        Raises UnknownModel, NoRuleInForce if any second has no price, ValueError if
        end_s < start_s.
        """
        _check_interval(start_s, end_s)
        if start_s == end_s:
            return []
        starts, rates = self._rent_pieces(tenant, gpu_model, start_s, end_s)
        for start, rate in zip(starts, rates):
            if rate is None:
                raise self._no_price(gpu_model, start)
        return _segments(starts, rates, end_s)

    def energy_segments(self, site: str, start_s: int, end_s: int) -> list[tuple[int, int, EnergyRate]]:
        """[start_s, end_s) as maximal (start, end, rate) pieces of constant electricity rate.

        A piece ends where the band, tariff or PUE changes: band edges by the site's
        wall clock (DST-safe), weekend/holiday calendars, versions taking effect at any
        local time. Pieces do not end at billing-period edges unless the rate changes
        there (split them with `period_bounds` when needed). Raises UnknownSite,
        NoRuleInForce if any second has no PUE or tariff, ValueError if end_s < start_s.
        """
        _check_interval(start_s, end_s)
        if start_s == end_s:
            return []
        starts, rates = self._energy_pieces(site, start_s, end_s)
        for start, rate in zip(starts, rates):
            if rate is None:
                raise self._no_energy_rule(site, start)
        return _segments(starts, rates, end_s)

    # internals ------------------------------------------------------------------------

    def _site(self, site_id: str) -> _Site:
        try:
            return self._sites[site_id]
        except KeyError:
            raise UnknownSite(f"unknown site {site_id!r} (sites.toml has {', '.join(self._sites)})") from None

    def _model_prices(self, gpu_model: str) -> Versions:
        prices = self._prices.get(gpu_model)
        if prices is None:
            raise UnknownModel(f"unknown GPU model {gpu_model!r} (catalog.toml has {', '.join(self._prices)})")
        return prices

    def _period_starts_in(self, start_s: int, end_s: int) -> list[int]:
        """Billing-period starts strictly inside (start_s, end_s)."""
        found = []
        period = self.period_of(start_s)
        while True:
            period = periods.next_period(period)
            edge = self.period_bounds(period)[0]
            if edge >= end_s:
                return found
            found.append(edge)

    def _rent_pieces(self, tenant: str, gpu_model: str, start_s: int, end_s: int) -> Pieces:
        prices = self._model_prices(gpu_model)
        contract = self._contracts.get((tenant, gpu_model))
        period_edges = self._period_starts_in(start_s, end_s)
        candidates = {start_s, *period_edges, *prices.changes_in(start_s, end_s)}
        if contract is not None:
            candidates.update(contract.changes_in(start_s, end_s))
        forced = set(period_edges)  # a new period starts a new piece even at the same rate
        starts: list[int] = []
        rates: list[RentRate | None] = []
        for instant in sorted(candidates):
            rate = self._rent_at(prices, contract, instant)
            if not rates or rate != rates[-1] or instant in forced:
                starts.append(instant)
                rates.append(rate)
        return tuple(starts), tuple(rates)

    def _rent_at(self, prices: Versions, contract: Versions | None, second: int) -> RentRate | None:
        price = prices.at(second)
        if price is None:
            return None
        term = contract.at(second) if contract is not None else None
        plan: Plan = term.plan if term is not None else "hourly"
        discount_pct = term.discount_pct if term is not None else Decimal(0)
        if plan == "monthly":
            list_price = price.monthly
            start, end = self.period_bounds(self.period_of(second))
            per_s = end - start
        else:
            list_price = price.hourly
            per_s = S_PER_HOUR
        rate = RentRate(plan=plan, price=discounted_price(list_price, discount_pct), per_s=per_s, list_price=list_price, discount_pct=discount_pct)
        return self._rates.setdefault(rate, rate)

    def _energy_pieces(self, site_id: str, start_s: int, end_s: int) -> Pieces:
        entry = self._site(site_id)
        candidates = {start_s, *entry.pue.changes_in(start_s, end_s), *entry.tariff.changes_in(start_s, end_s)}
        tariffs = entry.tariff
        for day, day_start, day_end in local_days(start_s, end_s, entry.tz):
            if start_s < day_start:
                candidates.add(day_start)  # the calendar (weekday/weekend/holiday) may switch
            first = max(tariffs.index_at(max(day_start, start_s)), 0)
            last = tariffs.index_at(min(day_end, end_s) - 1)
            minutes = {m for tariff in tariffs.values[first : last + 1] for m in tariff.edge_minutes}
            candidates.update(t for t in wall_clock_instants(day, minutes, entry.tz, day_start, day_end) if start_s < t < end_s)
        starts: list[int] = []
        rates: list[EnergyRate | None] = []
        for instant in sorted(candidates):
            rate = self._energy_at(entry, instant)
            if not rates or rate != rates[-1]:
                starts.append(instant)
                rates.append(rate)
        return tuple(starts), tuple(rates)

    def _energy_at(self, entry: _Site, second: int) -> EnergyRate | None:
        """The electricity rate at `second`, evaluated from the rules (no cache)."""
        pue = entry.pue.at(second)
        tariff: Tariff | None = entry.tariff.at(second)
        if pue is None or tariff is None:
            return None
        local = datetime.fromtimestamp(second, entry.tz)
        bands = tariff.bands_on(local.date())
        i = bands.index_at(local.hour * 60 + local.minute)
        rate = EnergyRate(band=bands.names[i], tariff_per_kwh=bands.prices[i], pue=pue)
        return self._rates.setdefault(rate, rate)

    def _no_price(self, gpu_model: str, second: int) -> NoRuleInForce:
        prices = self._model_prices(gpu_model)
        asked = datetime.fromtimestamp(second, self._billing_tz).isoformat()
        return NoRuleInForce(f"catalog.toml has no price for {gpu_model} before {prices.labels[0]} (asked for {asked})")

    def _no_energy_rule(self, site_id: str, second: int) -> NoRuleInForce:
        entry = self._site(site_id)
        later = entry.pue if entry.pue.starts[0] >= entry.tariff.starts[0] else entry.tariff
        asked = datetime.fromtimestamp(second, entry.tz).isoformat()
        return NoRuleInForce(
            f"sites.toml has no PUE and tariff for site {site_id} before {later.labels[0]} (asked for {asked})"
        )


def _check_interval(start_s: int, end_s: int) -> None:
    if end_s < start_s:
        raise ValueError(f"interval must have end_s ≥ start_s, got [{start_s}, {end_s})")


def _segments(starts: tuple[int, ...], rates: tuple[Any, ...], end_s: int) -> list[tuple[int, int, Any]]:
    ends = (*starts[1:], end_s)
    return list(zip(starts, ends, rates))


def _index_site(site_id: str, entry: Any) -> _Site:
    info = SiteInfo(
        id=site_id,
        name=entry.name,
        timezone=entry.timezone,
        green_share=entry.green_share,
        tariff_cap_per_kwh=entry.tariff_cap_per_kwh,
    )
    tz = ZoneInfo(entry.timezone)
    return _Site(
        info=info,
        tz=tz,
        pue=Versions.of(((v.effective_from, v.pue) for v in entry.pue), tz),
        tariff=Versions.of(((v.effective_from, Tariff.of(v)) for v in entry.tariff), tz),
    )


def _names_zh(billing: BillingFile, sites: SitesFile, contracts: ContractsFile) -> dict[tuple[str, str], str]:
    """(kind, key) → the `name_zh` / `reason_zh` the files give: sites, their bands, credit grants."""
    names: dict[tuple[str, str], str] = {}
    for site_id, site in sites.site.items():
        if site.name_zh:
            names["site", site_id] = site.name_zh
        for version in site.tariff:
            for band in (*version.bands, *(version.weekend_bands or ()), *(version.holiday_bands or ())):
                if band.name_zh:
                    names["band", f"{site_id}/{band.name}"] = band.name_zh
    credits = [*billing.new_tenant_credit, *(c for entry in contracts.tenant.values() for c in entry.credit)]
    for credit in credits:
        if credit.reason_zh:
            names["credit", credit.id] = credit.reason_zh
    return names


def _grant(entry: Any) -> CreditGrant:
    return CreditGrant(id=entry.id, amount=entry.amount, reason=entry.reason, expires_period=entry.expires_period)
