"""Load a rule directory as a whole, or refuse it with "<file>: <place>: <reason>".

Steps, each finishing before the next starts, so nothing is ever half-loaded:

1. the directory holds exactly the four rule files, each readable UTF-8 TOML
   (parsed with `parse_float=Decimal`: no float ever touches a price);
2. each file matches its pydantic model (`billing_rules.files`): keys, types, ranges;
3. each file's own consistency: time zones exist, versions are oldest first with no
   repeated `effective_from` (dates and local date-times compared as local instants; a
   date-time the clocks skip or repeat is refused), every band list (`bands`,
   `weekend_bands`, `holiday_bands`) covers the day once, holidays are listed once,
   PUE ≥ 1, credits are whole fen, dunning days increase and a suspension comes after
   the first reminder;
4. across files: contracts name catalog models and start after the model has a price;
5. only then is a `RuleSet` built.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Callable, Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ValidationError

from billing_rules.errors import RuleSetInvalid
from billing_rules.files import BillingFile, CatalogFile, ContractsFile, CreditEntry, SitesFile
from billing_rules.money import is_fen_exact
from billing_rules.parties import looks_like_uscc, uscc_problem
from billing_rules.ruleset import RuleSet
from billing_rules.timeline import as_local_datetime, label_of, local_datetime_problem, minutes_of

DEFAULT_RULES_DIR: Path = Path(__file__).resolve().parent / "default"

BILLING, SITES, CATALOG, CONTRACTS = "billing.toml", "sites.toml", "catalog.toml", "contracts.toml"
RULE_FILES = (BILLING, SITES, CATALOG, CONTRACTS)

MAX_GRACE_PERIOD = timedelta(days=366)
_KEYED_TABLES = {"site", "model", "tenant"}  # top-level tables keyed by an id: site[gz-guian]
_TOML_POSITION = re.compile(r"^(?P<reason>.*?) \(at (?P<place>line \d+, column \d+|end of document)\)$")
_DURATION = re.compile(r"P(?:(?P<w>\d+)W)?(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+)S)?)?")

M = TypeVar("M", bound=BaseModel)


def load_rules(path: Path) -> RuleSet:
    """Read, validate and index the rule directory `path`.

    Raises RuleSetInvalid naming the file (with its folder, as `path` was given: e.g.
    ``billing_rules/default/catalog.toml``), the entry and the reason for the first defect
    found (files in the order billing, sites, catalog, contracts). Nothing else escapes:
    whatever a hostile file makes fail (a nesting past the parser's depth, a duration past
    the calendar) is a RuleSetInvalid too, so that a running worker keeps its last good set.
    """
    path = Path(path)
    try:
        return _load(path)
    except RuleSetInvalid as exc:
        if exc.file not in RULE_FILES:  # the directory itself, or a stray file already named with it
            raise
        raise RuleSetInvalid(str(path / exc.file), exc.place, exc.reason) from exc.__cause__ or exc
    except Exception as exc:  # noqa: BLE001 - any failure of a load is a refusal, never a crash
        raise RuleSetInvalid(str(path), "directory", f"cannot be loaded: {_failure(exc)}") from exc


def _load(path: Path) -> RuleSet:
    documents, digest = _read_directory(path)
    billing = _guarded(BILLING, _parse, BILLING, documents[BILLING], BillingFile)
    sites = _guarded(SITES, _parse, SITES, documents[SITES], SitesFile)
    catalog = _guarded(CATALOG, _parse, CATALOG, documents[CATALOG], CatalogFile)
    contracts = _guarded(CONTRACTS, _parse, CONTRACTS, documents[CONTRACTS], ContractsFile)

    grace_period = _guarded(BILLING, _check_billing, billing)
    billing_tz = ZoneInfo(billing.billing_timezone)
    _guarded(SITES, _check_sites, sites)
    _guarded(CATALOG, _check_catalog, catalog, billing_tz)
    _guarded(CONTRACTS, _check_contracts, contracts, catalog, billing, billing_tz)

    return RuleSet(
        source=path,
        digest=digest,
        billing=billing,
        grace_period=grace_period,
        sites=sites,
        catalog=catalog,
        contracts=contracts,
    )


R = TypeVar("R")


def _guarded(file: str, step: Callable[..., R], *args: Any) -> R:
    """`step(*args)`; a failure other than the loader's own refusal is refused as `file`'s."""
    try:
        return step(*args)
    except RuleSetInvalid:
        raise
    except Exception as exc:  # noqa: BLE001 - see load_rules
        raise RuleSetInvalid(file, "file", f"cannot be loaded: {_failure(exc)}") from exc


def _failure(exc: BaseException) -> str:
    """What went wrong, in words where the exception's own are no help to someone editing a file."""
    if isinstance(exc, RecursionError):
        return "values nested too deeply (arrays or tables inside one another)"
    if isinstance(exc, OverflowError):
        return f"a value too large to compute with ({exc})"
    return f"{type(exc).__name__}: {exc}"


# step 1: files ------------------------------------------------------------------------


def _read_directory(path: Path) -> tuple[dict[str, dict[str, Any]], str]:
    if not path.exists():
        raise RuleSetInvalid(str(path), "directory", "does not exist (pass a rules directory or set GPUBILL_RULES)")
    if not path.is_dir():
        raise RuleSetInvalid(str(path), "directory", "is not a directory")
    for extra in sorted(p.name for p in path.glob("*.toml") if p.name not in RULE_FILES):
        expected = ", ".join(RULE_FILES)
        raise RuleSetInvalid(str(path / extra), "file", f"is not a rule file (expected only {expected}); remove or rename it")
    documents: dict[str, dict[str, Any]] = {}
    sha = hashlib.sha256()
    for name in RULE_FILES:
        file = path / name
        if not file.is_file():
            raise RuleSetInvalid(name, "file", "is missing (a rule directory holds all four files)")
        try:
            data = file.read_bytes()
            text = data.decode("utf-8")
        except OSError as exc:
            raise RuleSetInvalid(name, "file", f"cannot be read: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise RuleSetInvalid(name, "file", f"is not UTF-8 (byte {exc.start})") from exc
        try:
            documents[name] = tomllib.loads(text, parse_float=Decimal)
        except tomllib.TOMLDecodeError as exc:
            match = _TOML_POSITION.match(str(exc))
            place, reason = (match["place"], match["reason"]) if match else ("file", str(exc))
            raise RuleSetInvalid(name, place, f"not valid TOML: {reason}") from exc
        except RecursionError as exc:  # tomllib parses nested arrays and tables by recursion
            raise RuleSetInvalid(name, "file", f"cannot be read: {_failure(exc)}") from exc
        except Exception as exc:  # noqa: BLE001 - e.g. an integer past Python's digit limit
            raise RuleSetInvalid(name, "file", f"cannot be read: {_failure(exc)}") from exc
        sha.update(f"{name}\0{len(data)}\0".encode() + data)
    return documents, sha.hexdigest()


# step 2: shapes -----------------------------------------------------------------------


def _parse(file: str, document: dict[str, Any], model: type[M]) -> M:
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        place, reason = _describe(errors[0])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise RuleSetInvalid(file, place, reason + more) from exc


def place_of(loc: Sequence[str | int]) -> str:
    """("site", "gz-guian", "tariff", 0, "bands") -> "site[gz-guian].tariff[0].bands"."""
    text = ""
    for i, item in enumerate(loc):
        if isinstance(item, int) or (i == 1 and loc[0] in _KEYED_TABLES):
            text += f"[{item}]"
        elif item != "[key]":
            text += f".{item}" if text else str(item)
    return text or "top level"


def _describe(error: dict[str, Any]) -> tuple[str, str]:
    loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        return place_of(loc[:-1]), f"unknown key {loc[-1]!r}"
    if kind == "missing":
        return place_of(loc[:-1]), f"missing key {loc[-1]!r}"
    if loc and loc[-1] == "[key]":
        return place_of(loc), "id must be letters, digits, '.', '_' or '-' (at most 64)"
    value = error.get("input")
    shown = _shown(value)
    message = str(error["msg"])
    return place_of(loc), f"{message[:1].lower()}{message[1:]}, got {shown!r}" if len(shown) <= 40 else message


# step 3: each file --------------------------------------------------------------------


def _check_billing(billing: BillingFile) -> timedelta:
    _check_timezone(BILLING, "billing_timezone", billing.billing_timezone)
    grace_period = _parse_duration(billing.grace_period)
    if grace_period is None:
        raise RuleSetInvalid(
            BILLING, "grace_period", f'must be an ISO 8601 duration such as "P3D" or "PT36H", got {billing.grace_period!r}'
        )
    if grace_period > MAX_GRACE_PERIOD:
        raise RuleSetInvalid(BILLING, "grace_period", f"must be at most P{MAX_GRACE_PERIOD.days}D (a period's invoices "
                             f"wait that long after it ends), got {billing.grace_period!r}")
    _check_versions(BILLING, "vat", billing.vat, None)
    for i, version in enumerate(billing.vat):
        if version.effective_from.day != 1:
            raise RuleSetInvalid(
                BILLING, f"vat[{i}].effective_from", f"VAT changes on the first day of a period, got {version.effective_from}"
            )
    _check_credits(BILLING, "new_tenant_credit", billing.new_tenant_credit, taken={})
    if billing.seller is not None and looks_like_uscc(billing.seller.tax_id):
        problem = uscc_problem(billing.seller.tax_id)
        if problem:
            raise RuleSetInvalid(BILLING, "seller.tax_id", problem)
    if billing.dunning is not None:
        _check_dunning(billing.dunning)
    return grace_period


def _check_dunning(dunning: Any) -> None:
    """Reminder days strictly increasing; a suspension only after a first reminder (a tenant is
    always told at least a day before its new rentals are refused)."""
    days = dunning.overdue_days
    for i in range(1, len(days)):
        if days[i] <= days[i - 1]:
            raise RuleSetInvalid(BILLING, f"dunning.overdue_days[{i}]", f"{days[i]} is not after overdue_days[{i - 1}] "
                                 f"({days[i - 1]}); list the days in increasing order, each once")
    suspend = dunning.suspend_new_rentals_days
    if suspend is not None and suspend <= days[0]:
        raise RuleSetInvalid(BILLING, "dunning.suspend_new_rentals_days", f"{suspend} must be after the first reminder "
                             f"(overdue_days[0] = {days[0]}): a tenant is told before its new rentals are refused")


def _check_sites(sites: SitesFile) -> None:
    for site_id, site in sites.site.items():
        where = f"site[{site_id}]"
        _check_timezone(SITES, f"{where}.timezone", site.timezone)
        tz = ZoneInfo(site.timezone)
        _check_versions(SITES, f"{where}.pue", site.pue, tz)
        for i, version in enumerate(site.pue):
            if version.pue < 1:
                raise RuleSetInvalid(SITES, f"{where}.pue[{i}].pue", f"PUE must be at least 1, got {version.pue}")
        _check_versions(SITES, f"{where}.tariff", site.tariff, tz)
        for i, version in enumerate(site.tariff):
            _check_tariff(f"{where}.tariff[{i}]", version, site.tariff_cap_per_kwh)


def _check_tariff(where: str, version: Any, cap: Decimal | None) -> None:
    _check_bands(f"{where}.bands", version.bands, cap)
    if version.weekend_bands is not None:
        _check_bands(f"{where}.weekend_bands", version.weekend_bands, cap)
    if version.holiday_bands is not None:
        _check_bands(f"{where}.holiday_bands", version.holiday_bands, cap)
        if not version.holidays:
            reason = "holiday_bands are given but holidays is empty; list the holiday dates or remove holiday_bands"
            raise RuleSetInvalid(SITES, f"{where}.holiday_bands", reason)
    seen: dict[date, int] = {}
    for k, day in enumerate(version.holidays):
        if day in seen:
            raise RuleSetInvalid(SITES, f"{where}.holidays[{k}]", f"{day} repeats holidays[{seen[day]}]")
        seen[day] = k


def _check_bands(where: str, bands: Sequence[Any], cap: Decimal | None) -> None:
    """Bands must cover [00:00, 24:00) of local time exactly once."""
    for j, band in enumerate(bands):
        start, end = minutes_of(band.start), minutes_of(band.end)
        if start >= end:
            raise RuleSetInvalid(SITES, f"{where}[{j}]", f"band {band.name!r} must end after it starts ({band.start}–{band.end})")
        if cap is not None and band.price_per_kwh > cap:
            raise RuleSetInvalid(
                SITES, f"{where}[{j}].price_per_kwh", f"{band.price_per_kwh} exceeds the site's tariff_cap_per_kwh {cap}"
            )
    covered = 0  # minutes after midnight covered so far
    for band in sorted(bands, key=lambda b: minutes_of(b.start)):
        start, end = minutes_of(band.start), minutes_of(band.end)
        if start < covered:
            raise RuleSetInvalid(SITES, where, f"bands overlap at {band.start}")
        if start > covered:
            raise RuleSetInvalid(SITES, where, f"bands leave a gap from {_clock(covered)} to {band.start}")
        covered = end
    if covered != 24 * 60:
        raise RuleSetInvalid(SITES, where, f"bands leave a gap from {_clock(covered)} to 24:00")


def _check_catalog(catalog: CatalogFile, billing_tz: ZoneInfo) -> None:
    for model_id, model in catalog.model.items():
        where = f"model[{model_id}].price"
        if not model.price:
            raise RuleSetInvalid(CATALOG, where, f"model has no price; add a [[model.{model_id}.price]] version")
        _check_versions(CATALOG, where, model.price, billing_tz)


def _check_contracts(contracts: ContractsFile, catalog: CatalogFile, billing: BillingFile, billing_tz: ZoneInfo) -> None:
    new_tenant_ids = {c.id: f"{BILLING} new_tenant_credit" for c in billing.new_tenant_credit}
    for tenant, entry in contracts.tenant.items():
        where = f"tenant[{tenant}]"
        latest: dict[str, tuple[int, datetime]] = {}  # gpu_model -> (index, local effective_from) of its last term
        for i, term in enumerate(entry.rent):
            _check_local_instant(CONTRACTS, f"{where}.rent[{i}].effective_from", term.effective_from, billing_tz)
            model = catalog.model.get(term.gpu_model)
            if model is None:
                known = ", ".join(sorted(catalog.model))
                raise RuleSetInvalid(
                    CONTRACTS, f"{where}.rent[{i}].gpu_model", f"unknown model {term.gpu_model!r} (catalog.toml has {known})"
                )
            first_price = model.price[0].effective_from
            starts = as_local_datetime(term.effective_from)
            if starts < as_local_datetime(first_price):
                raise RuleSetInvalid(
                    CONTRACTS,
                    f"{where}.rent[{i}].effective_from",
                    f"{label_of(term.effective_from)} is before catalog.toml prices {term.gpu_model} (from {label_of(first_price)})",
                )
            if term.gpu_model in latest:
                j, previous = latest[term.gpu_model]
                if starts <= previous:
                    what = "repeats" if starts == previous else "is earlier than"
                    raise RuleSetInvalid(
                        CONTRACTS,
                        f"{where}.rent[{i}].effective_from",
                        f"{label_of(term.effective_from)} {what} rent[{j}] ({label_of(entry.rent[j].effective_from)})"
                        f" for {term.gpu_model}; list terms oldest first",
                    )
            latest[term.gpu_model] = (i, starts)
        _check_credits(CONTRACTS, f"{where}.credit", entry.credit, taken=dict(new_tenant_ids))


# shared checks ------------------------------------------------------------------------


def _check_timezone(file: str, place: str, name: str) -> None:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name longer than a file name may be
        raise RuleSetInvalid(file, place, f"unknown time zone {name!r} (use an IANA name such as 'Asia/Shanghai')") from None


def _check_versions(file: str, place: str, versions: Sequence[Any], tz: ZoneInfo | None) -> None:
    """Versions are listed oldest first, each `effective_from` strictly after the previous.

    Dates and local date-times mix freely: a date is its 00:00. `tz` is the zone the
    date-times are read in (None where only dates are allowed).
    """
    for i, version in enumerate(versions):
        if tz is not None:
            _check_local_instant(file, f"{place}[{i}].effective_from", version.effective_from, tz)
        if i == 0:
            continue
        previous, current = versions[i - 1].effective_from, version.effective_from
        if as_local_datetime(current) == as_local_datetime(previous):
            raise RuleSetInvalid(file, f"{place}[{i}].effective_from", f"{label_of(current)} repeats {place}[{i - 1}]")
        if as_local_datetime(current) < as_local_datetime(previous):
            reason = f"{label_of(current)} is earlier than {place}[{i - 1}] ({label_of(previous)}); list versions oldest first"
            raise RuleSetInvalid(file, f"{place}[{i}].effective_from", reason)


def _check_local_instant(file: str, place: str, value: date | datetime, tz: ZoneInfo) -> None:
    """A local date-time must name one instant: not skipped nor repeated by a DST change."""
    if isinstance(value, datetime):
        problem = local_datetime_problem(value, tz)
        if problem is not None:
            raise RuleSetInvalid(file, place, f"{label_of(value)} {problem} in {tz.key}; pick another time")


def _check_credits(file: str, place: str, credits: Sequence[CreditEntry], taken: dict[str, str]) -> None:
    for i, credit in enumerate(credits):
        if not is_fen_exact(credit.amount):
            raise RuleSetInvalid(file, f"{place}[{i}].amount", f"credit must be whole fen (two decimals), got {credit.amount}")
        if credit.id in taken:
            raise RuleSetInvalid(file, f"{place}[{i}].id", f"credit id {credit.id!r} is already used by {taken[credit.id]}")
        taken[credit.id] = f"{place}[{i}]"


def _parse_duration(text: str) -> timedelta | None:
    match = _DURATION.fullmatch(text)
    if match is None or text in ("P", "PT") or text.endswith("T"):
        return None
    if any(len(match[k] or "") > 9 for k in "wdhms"):  # past timedelta's range (and any grace period allowed)
        return MAX_GRACE_PERIOD + timedelta(days=1)
    weeks, days, hours, minutes, seconds = (int(match[k] or 0) for k in "wdhms")
    return timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)


def _shown(value: object) -> str:
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, (Decimal, int, str)):
        return str(value)
    return type(value).__name__


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"
