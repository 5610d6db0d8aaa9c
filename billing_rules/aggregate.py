"""Pricing of aggregates (issue 3, item 4): counts and sums per price segment, exactly. Pure.

Prices are piecewise constant in time, so a month need not be priced one second at a
time. Callers aggregate readings per (tenant, instance, gpu, gpu_model, site, interval)
— `seconds` = rented GPU-seconds counted, `energy_mj` = IT energy summed — and this
module prices each aggregate as a whole:

    rent   = Σ seconds × price / per_s            (one RentRate for the whole interval)
    energy = Σ energy_mj × pue × tariff / 3.6e9   (one EnergyRate for the whole interval)

which is exactly the per-second sum of SPEC §4, *provided every interval lies inside one
price segment and one billing period*. A sum cannot be split after the fact (how much of
an hour's energy fell before 12:00 is not recoverable from the hour's total), so callers
aggregate per price segment: build buckets with `aggregation_buckets` (the hour grid
split at every `RuleSet.price_boundaries` instant) and group readings by bucket. An
aggregate that straddles a price change is refused with `AggregateStraddlesPrice`,
naming it.

Speed: rows are taken as columns (`AggregateColumns`, e.g. a ClickHouse result's
`result_columns` for `... ORDER BY tenant, instance, gpu, gpu_model, site, start_s`).
Rows of one series come as a run in time order, so each price segment of a run is a
contiguous slice: its seconds and energy are summed as plain ints by `sum()` over the
slice, and Fractions appear only once per invoice line. Rows in any other order are
first regrouped (slower, same result).

Errors (both ValueError and BillingRulesError, defined in `billing_rules.errors`):
    InvalidAggregate          columns of unequal length, negative counts, end ≤ start
    AggregateStraddlesPrice   an aggregate's interval contains a price or period boundary

The amounts are `RentRate.cost` and `EnergyRate.cost` (`billing_rules.pricing`), applied
once per total. Why this file is longer than 400 lines: it is one idea, pricing aggregates
fast — the bucket grid callers must aggregate by (`aggregation_buckets`, documented in
docs/rules.md as living here), the column input, and the run/slice machinery that keeps
the month's sums in plain ints belong with the pricing they serve.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from itertools import compress, groupby, islice
from operator import ge, lt
from typing import Any

from billing_rules.errors import AggregateStraddlesPrice, InvalidAggregate
from billing_rules.invoice import EnergyUsage, RentUsage
from billing_rules.rates import EnergyRate, RentRate
from billing_rules.ruleset import RuleSet


@dataclass(frozen=True, slots=True)
class AggregateColumns:
    """Aggregates as parallel columns; row i is (tenant[i], instance[i], …, energy_mj[i]).

    The key is (tenant, instance, gpu, gpu_model, site, start_s, end_s): [start_s, end_s)
    in UTC epoch seconds. `tenant` None means not rented: its energy is unallocated (the
    operator's idle cost) and its `seconds` are not rent. `instance` and `gpu` do not
    change a price; they name a refused aggregate.
    """

    tenant: Sequence[str | None]
    instance: Sequence[str]
    gpu: Sequence[str]
    gpu_model: Sequence[str]
    site: Sequence[str]
    start_s: Sequence[int]
    end_s: Sequence[int]
    seconds: Sequence[int]  # rented GPU-seconds counted in the interval
    energy_mj: Sequence[int]  # IT energy in the interval, millijoules

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[Any]]) -> AggregateColumns:
        """Columns from rows (tenant, instance, gpu, gpu_model, site, start_s, end_s, seconds, energy_mj)."""
        columns = list(zip(*rows, strict=True))
        if not columns:
            return cls((), (), (), (), (), (), (), (), ())
        if len(columns) != 9:
            raise InvalidAggregate(f"aggregate rows have 9 fields, got {len(columns)}")
        return cls(*columns)

    def __len__(self) -> int:
        return len(self.start_s)

    def describe(self, i: int) -> str:
        """Row i in words, for error messages."""
        start, end = _utc(self.start_s[i]), _utc(self.end_s[i])
        return (
            f"aggregate #{i} (tenant={self.tenant[i]}, instance={self.instance[i]}, gpu={self.gpu[i]}, "
            f"model={self.gpu_model[i]}, site={self.site[i]}, {start}–{end})"
        )


@dataclass(frozen=True, slots=True)
class RentTotal:
    """Rent of `tenant` in `period` at one rate: an invoice rent line's content, exact."""

    tenant: str
    period: str
    gpu_model: str
    rate: RentRate
    seconds: int

    @property
    def amount(self) -> Fraction:
        """Yuan, discount included, before rounding: `rate.cost(seconds)`."""
        return self.rate.cost(self.seconds)

    def usage(self) -> RentUsage:
        return RentUsage.priced(self.gpu_model, self.rate, self.seconds)


@dataclass(frozen=True, slots=True)
class EnergyTotal:
    """Electricity of `tenant` (None: unallocated) in `period` at one site and rate, exact."""

    tenant: str | None
    period: str
    site: str
    rate: EnergyRate
    energy_mj: int  # IT energy, before PUE

    @property
    def billed_kwh(self) -> Fraction:
        """Facility kWh (IT energy × PUE), exact: `rate.billed_kwh(energy_mj)`."""
        return self.rate.billed_kwh(self.energy_mj)

    @property
    def amount(self) -> Fraction:
        """Yuan before rounding: `rate.cost(energy_mj)`."""
        return self.rate.cost(self.energy_mj)

    def usage(self) -> EnergyUsage:
        return EnergyUsage.priced(self.site, self.rate, self.energy_mj)


@dataclass(frozen=True, slots=True)
class PricedAggregates:
    """Totals per invoice-line key; lines with zero seconds or zero energy are left out."""

    rent: tuple[RentTotal, ...]  # sorted by tenant, period, model, plan, price
    energy: tuple[EnergyTotal, ...]  # sorted by tenant (None first), period, site, band, tariff, pue
    gpu_seconds: int  # rented GPU-seconds priced
    energy_mj: int  # IT energy priced, allocated and unallocated

    def rent_usages(self, tenant: str, period: str) -> list[RentUsage]:
        return [t.usage() for t in self.rent if t.tenant == tenant and t.period == period]

    def energy_usages(self, tenant: str | None, period: str) -> list[EnergyUsage]:
        return [t.usage() for t in self.energy if t.tenant == tenant and t.period == period]


# buckets ------------------------------------------------------------------------------


def segment_edges(
    rules: RuleSet,
    start_s: int,
    end_s: int,
    *,
    site: str | None = None,
    tenant: str | None = None,
    gpu_model: str | None = None,
) -> list[int]:
    """[start_s, every price or period boundary inside, end_s]: consecutive pairs are
    intervals of one price for the series asked about (see `RuleSet.price_boundaries`)."""
    inside = rules.price_boundaries(start_s, end_s, site=site, tenant=tenant, gpu_model=gpu_model)
    return [start_s, *inside, end_s] if end_s > start_s else []


def aggregation_buckets(
    rules: RuleSet,
    start_s: int,
    end_s: int,
    *,
    step_s: int = 3600,
    site: str | None = None,
    tenant: str | None = None,
    gpu_model: str | None = None,
) -> list[tuple[int, int]]:
    """[start_s, end_s) cut on the grid of multiples of `step_s` (UTC epoch, like
    ClickHouse's toStartOfInterval) and at every price boundary: aggregate readings per
    bucket and every aggregate has one price."""
    if step_s <= 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    if end_s <= start_s:
        return []
    grid = range((start_s // step_s + 1) * step_s, end_s, step_s)
    edges = sorted({*grid, *segment_edges(rules, start_s, end_s, site=site, tenant=tenant, gpu_model=gpu_model)})
    return list(zip(edges, edges[1:]))


# pricing ------------------------------------------------------------------------------


def price_aggregates(rules: RuleSet, aggregates: AggregateColumns) -> PricedAggregates:
    """Price every aggregate exactly and total them per tenant, period and invoice-line key.

    Raises InvalidAggregate, AggregateStraddlesPrice (naming the first offending
    aggregate), UnknownModel/UnknownSite, or NoRuleInForce for an interval without rules.
    Order of rows never changes the result; rows grouped per series in time order are
    priced fastest.
    """
    columns = aggregates
    _validate(columns)
    if len(columns) == 0:
        return PricedAggregates(rent=(), energy=(), gpu_seconds=0, energy_mj=0)
    runs = _runs(columns)
    if len(runs) * 8 > len(columns):  # not grouped per series: regroup, then price the groups
        columns = _regrouped(columns)
        runs = _runs(columns)
    plans = _plans(rules, columns, runs)

    rent_seconds = [0] * len(plans.rent_keys)
    energy_mj = [0] * len(plans.energy_keys)
    tenants, models, sites = columns.tenant, columns.gpu_model, columns.site
    starts, ends, seconds, energies = columns.start_s, columns.end_s, columns.seconds, columns.energy_mj
    previous: tuple[Any, list[int], list[int], list[tuple[int, int, int, int]]] | None = None
    for lo, hi in runs:
        plan = plans.by_series[tenants[lo], models[lo], sites[lo]]
        run_starts, run_ends = starts[lo:hi], ends[lo:hi]
        # Runs of one fleet usually share their buckets: then they share their slices too.
        if previous is not None and previous[0] is plan and previous[1] == run_starts and previous[2] == run_ends:
            slices = previous[3]
        else:
            slices = _slices(plan, run_starts, run_ends)
            if isinstance(slices, tuple):
                bad, edge = slices
                raise _straddles(rules, columns, lo + bad, edge)
            previous = (plan, run_starts, run_ends, slices)
        for i, j, rent_line, energy_line in slices:
            if rent_line >= 0:
                rent_seconds[rent_line] += sum(seconds[lo + i : lo + j])
            energy_mj[energy_line] += sum(energies[lo + i : lo + j])
    return _totals(plans, rent_seconds, energy_mj)


_Plan = tuple[list[int], list[int], list[int]]  # edges, rent line per segment (-1: none), energy line per segment


def _slices(plan: _Plan, starts: Sequence[int], ends: Sequence[int]) -> list[tuple[int, int, int, int]] | tuple[int, int]:
    """(i, j, rent line, energy line) for the rows [i, j) of a run starting in one segment;
    or (row, edge) for the first row that straddles a segment edge."""
    edges, rent_lines, energy_lines = plan
    n = len(starts)
    ends_sorted = ends == sorted(ends)  # true for one card's buckets: max of a slice is its last
    slices = []
    k = bisect_right(edges, starts[0]) - 1
    i = 0
    while i < n:
        edge = edges[k + 1]
        j = bisect_left(starts, edge, i, n)
        if (ends[j - 1] if ends_sorted else max(ends[i:j])) > edge:
            return next(r for r in range(i, j) if ends[r] > edge), edge
        slices.append((i, j, rent_lines[k], energy_lines[k]))
        i = j
        if i < n:
            k = bisect_right(edges, starts[i], k + 1) - 1
    return slices


@dataclass(slots=True)
class _Plans:
    by_series: dict[tuple[Any, str, str], _Plan]  # (tenant, model, site) -> its price segments
    rent_keys: list[tuple[str, str, str, RentRate]]  # line -> (tenant, period, model, rate)
    energy_keys: list[tuple[str | None, str, str, EnergyRate]]  # line -> (tenant, period, site, rate)


def _plans(rules: RuleSet, columns: AggregateColumns, runs: list[tuple[int, int]]) -> _Plans:
    """Price segments of every series over the span its rows cover, with line numbers."""
    spans: dict[tuple[Any, str, str], list[int]] = {}
    for lo, hi in runs:
        key = (columns.tenant[lo], columns.gpu_model[lo], columns.site[lo])
        first, last = columns.start_s[lo], max(columns.end_s[lo:hi])
        span = spans.get(key)
        if span is None:
            spans[key] = [first, last]
        else:
            span[0], span[1] = min(span[0], first), max(span[1], last)
    plans = _Plans(by_series={}, rent_keys=[], energy_keys=[])
    rent_lines: dict[tuple[str, str, str, RentRate], int] = {}
    energy_lines: dict[tuple[str | None, str, str, EnergyRate], int] = {}
    memo: dict[tuple[Any, ...], Any] = {}  # series share sites, models and spans: compute each once

    def once(key: tuple[Any, ...], compute: Any) -> Any:
        if key not in memo:
            memo[key] = compute()
        return memo[key]

    for (tenant, model, site), (start, end) in spans.items():
        energy = once(("energy", site, start, end), lambda: rules.energy_segments(site, start, end))
        rent_tenant = "" if tenant is None else tenant  # unrented rows: the model must still exist
        rent = once(("rent", rent_tenant, model, start, end), lambda: rules.rent_segments(rent_tenant, model, start, end))
        period_edges = once(("periods", start, end), lambda: rules.price_boundaries(start, end))
        e_starts = [s for s, _, _ in energy]
        r_starts = [s for s, _, _ in rent]
        # energy pieces may cross a period edge at an unchanged rate; invoices may not
        edges = sorted({start, end, *e_starts, *r_starts, *period_edges})
        rent_line: list[int] = []
        energy_line: list[int] = []
        for a in edges[:-1]:
            period = once(("period", a), lambda: rules.period_of(a))
            e_rate = energy[bisect_right(e_starts, a) - 1][2]
            energy_line.append(_line(energy_lines, plans.energy_keys, (tenant, period, site, e_rate)))
            if tenant is None:
                rent_line.append(-1)
            else:
                r_rate = rent[bisect_right(r_starts, a) - 1][2]
                rent_line.append(_line(rent_lines, plans.rent_keys, (tenant, period, model, r_rate)))
        plans.by_series[tenant, model, site] = (edges, rent_line, energy_line)
    return plans


def _line(lines: dict[Any, int], keys: list[Any], key: Any) -> int:
    line = lines.get(key)
    if line is None:
        line = lines[key] = len(keys)
        keys.append(key)
    return line


def _totals(plans: _Plans, rent_seconds: list[int], energy_mj: list[int]) -> PricedAggregates:
    rent = [RentTotal(*key, seconds) for key, seconds in zip(plans.rent_keys, rent_seconds) if seconds]
    energy = [EnergyTotal(*key, mj) for key, mj in zip(plans.energy_keys, energy_mj) if mj]
    rent.sort(key=lambda t: (t.tenant, t.period, t.gpu_model, t.rate.plan, t.rate.price, t.rate.per_s, t.rate.list_price))
    energy.sort(
        key=lambda t: (t.tenant is not None, t.tenant or "", t.period, t.site, t.rate.band, t.rate.tariff_per_kwh, t.rate.pue)
    )
    return PricedAggregates(
        rent=tuple(rent),
        energy=tuple(energy),
        gpu_seconds=sum(rent_seconds),
        energy_mj=sum(energy_mj),
    )


def _validate(columns: AggregateColumns) -> None:
    n = len(columns.start_s)
    for name in ("tenant", "instance", "gpu", "gpu_model", "site", "end_s", "seconds", "energy_mj"):
        if len(getattr(columns, name)) != n:
            raise InvalidAggregate(f"column {name} has {len(getattr(columns, name))} rows, start_s has {n}")
    if n == 0:
        return
    for name in ("seconds", "energy_mj"):
        values = getattr(columns, name)
        if min(values) < 0:
            bad = next(i for i, v in enumerate(values) if v < 0)
            raise InvalidAggregate(f"{columns.describe(bad)}: {name} must be ≥ 0, got {values[bad]}")
    if any(map(ge, columns.start_s, columns.end_s)):
        empty = next(compress(range(n), map(ge, columns.start_s, columns.end_s)))
        raise InvalidAggregate(f"{columns.describe(empty)}: the interval must end after it starts")


def _runs(columns: AggregateColumns) -> list[tuple[int, int]]:
    """[lo, hi) row ranges with one (tenant, model, site) and non-decreasing start_s.

    Cut where time goes back (one C-level pass), then confirm each piece has one key with
    list.count (identity-fast); a piece that does not is cut where its key changes.
    """
    n = len(columns.start_s)
    starts = columns.start_s
    cuts = compress(range(1, n), map(lt, islice(starts, 1, None), starts))
    bounds = [0, *cuts, n]
    runs: list[tuple[int, int]] = []
    keyed = (columns.tenant, columns.gpu_model, columns.site)
    for lo, hi in zip(bounds, bounds[1:]):
        if all(column[lo:hi].count(column[lo]) == hi - lo for column in keyed):
            runs.append((lo, hi))
            continue
        at = lo
        for _, group in groupby(zip(*(column[lo:hi] for column in keyed))):
            size = sum(1 for _ in group)
            runs.append((at, at + size))
            at += size
    return runs


def _regrouped(columns: AggregateColumns) -> AggregateColumns:
    """Rows summed per (tenant, model, site, start, end), in series and time order.

    Every row of a group has the same interval and price, so the first row's instance
    and gpu name the group correctly in a straddle error.
    """
    groups: dict[tuple[Any, str, str, int, int], list[int]] = {}
    rows = zip(columns.tenant, columns.gpu_model, columns.site, columns.start_s, columns.end_s, columns.seconds, columns.energy_mj)
    for i, (tenant, model, site, start, end, seconds, energy) in enumerate(rows):
        key = (tenant, model, site, start, end)
        group = groups.get(key)
        if group is None:
            groups[key] = [seconds, energy, i]
        else:
            group[0] += seconds
            group[1] += energy
    order = sorted(groups, key=lambda k: (k[0] is not None, k[0] or "", k[1], k[2], k[3], k[4]))
    firsts = [groups[k][2] for k in order]
    return AggregateColumns(
        tenant=[k[0] for k in order],
        instance=[columns.instance[i] for i in firsts],
        gpu=[columns.gpu[i] for i in firsts],
        gpu_model=[k[1] for k in order],
        site=[k[2] for k in order],
        start_s=[k[3] for k in order],
        end_s=[k[4] for k in order],
        seconds=[groups[k][0] for k in order],
        energy_mj=[groups[k][1] for k in order],
    )


def _straddles(rules: RuleSet, columns: AggregateColumns, row: int, edge: int) -> AggregateStraddlesPrice:
    local = datetime.fromtimestamp(edge, rules.billing_tz).isoformat()
    return AggregateStraddlesPrice(
        f"{columns.describe(row)} straddles a price or billing-period boundary at {_utc(edge)} ({local});"
        " aggregate per price segment (billing_rules.aggregate.aggregation_buckets)"
    )


def _utc(second: int) -> str:
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
