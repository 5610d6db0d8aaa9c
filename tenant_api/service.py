"""The one place the JSON API and the web page read through: who is asking, for which
tenant, and what they get — with the limits and the access records around every answer.

    authenticate(token, client)      Bearer key → ApiKey; 401 (recorded) or 429 (slowed down)
    tenant_for(key, requested)       the tenant of a request comes from its key and nothing else
    me / current / balance / daily / invoices / credit_notes  small JSON-able answers, cached a few seconds
    payments / account / statement   the tenant's payments, what it owes, its statement of account (issue 38)
    usage_download / invoice_download / credit_note_download / statement_download
                                     a `Download` (bytes, media type, safe file name),
                                     under the key's cap of downloads in flight, recorded

Every method raises `Problem` for what it refuses; the app renders it as problem JSON and
records it. Reads go through `Reads` (tenant_api/reads.py): the embedded database's one
client, or a small pool of clients of a server.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from billing.errors import NotFound
from reports.outputs import output_name
from tenant_api.cache import TtlCache
from tenant_api.limits import AuthThrottle, DownloadSlots, RateLimiter
from tenant_api.problems import Problem, bad_param
from tenant_api.reads import Reads
from tenant_api.records import AccessRecorder, current_request

if TYPE_CHECKING:
    from tenant_api.keys import ApiKey
    from billing.balances import Balance
    from billing.current_usage import CurrentUsage, DailyUsage
    from billing.live_spend import LivePosition
    from billing.tenant_invoices import Account
    from reports.statement import StatementDocument

__all__ = ["CREDIT_NOTE_FORMATS", "Download", "GRANULARITIES", "INVOICE_FORMATS", "Limits", "Problem", "STATEMENT_FORMATS",
           "Service", "USAGE_FORMATS"]

log = logging.getLogger("gpubill.api")

USAGE_FORMATS = ("csv", "json", "parquet", "pdf")
INVOICE_FORMATS = ("json", "csv", "pdf")
CREDIT_NOTE_FORMATS = INVOICE_FORMATS  # the documents come in the same formats
GRANULARITIES = ("day", "hour")
STATEMENT_FORMATS = ("json", "csv", "pdf")
MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json", "pdf": "application/pdf",
               "parquet": "application/vnd.apache.parquet"}
# ASCII digits only: \d would take "２０２６" too
PERIOD = re.compile(r"[0-9]{4}-(0[1-9]|1[0-2])")
INVOICE_NUMBER = re.compile(r"GB-[0-9]{4}-[0-9]{6}")
CREDIT_NOTE_NUMBER = re.compile(r"CN-[0-9]{4}-[0-9]{6}")
DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")  # ASCII digits only, like PERIOD
CACHE_BYTES = 256 << 20  # what built reports and files may hold in memory together
ROW_BYTES = 600  # about what one report row weighs as Python objects
KEY_CACHE_S = 5.0  # a revoked key stops working within this long (the cache holds verified keys only)


@dataclass(frozen=True)
class Download:
    """A file for the client: its bytes, media type and a file name built by reports.outputs
    (only id characters, so it is safe in a Content-Disposition header as it is)."""

    body: bytes
    media_type: str
    filename: str


@dataclass(frozen=True)
class Limits:
    """The API's limits (GPUBILL_API_* settings; docs/api.md says what each protects)."""

    rate_per_s: float = 20.0          # requests per second per key, sustained
    rate_burst: int = 100             # requests per key at once after a quiet spell
    downloads_per_key: int = 8        # downloads of one key in flight at once
    auth_failures: int = 10           # failed authentications from one address with one key id ...
    auth_window_s: float = 300.0      # ... within this window, then 429 until the oldest leaves it
    auth_key_failures: int = 50       # ... of one key id from anywhere (its holders keep working)
    auth_failures_ceiling: int = 1000  # ... of all together: past it a failure is 429 (valid keys work)
    cache_s: float = 10.0             # how long a built report or month-to-date figure is reused

    @classmethod
    def from_settings(cls, settings: Any) -> "Limits":
        return cls(rate_per_s=settings.api_rate_per_s, rate_burst=settings.api_rate_burst,
                   downloads_per_key=settings.api_downloads_per_key, auth_failures=settings.api_auth_failures,
                   auth_window_s=float(settings.api_auth_window_s), auth_key_failures=settings.api_auth_key_failures,
                   auth_failures_ceiling=settings.api_auth_failures_ceiling, cache_s=float(settings.api_cache_s))


class Service:
    """Reads for one tenant at a time, on behalf of a verified key."""

    def __init__(self, reads: Reads, rules_provider: Callable[[], Any], recorder: AccessRecorder, *,
                 limits: Limits = Limits(), clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.reads = reads
        self.rules_provider = rules_provider
        self.recorder = recorder
        self.limits = limits
        self.clock = clock
        self.now = now
        self.rate = RateLimiter(limits.rate_per_s, limits.rate_burst, clock=clock)
        self.downloads = DownloadSlots(limits.downloads_per_key)
        self.throttle = AuthThrottle(limits.auth_failures, limits.auth_window_s, per_key=limits.auth_key_failures,
                                     ceiling=limits.auth_failures_ceiling, clock=clock)
        self.keys = TtlCache(KEY_CACHE_S, clock=clock, max_entries=10_000)
        self.cache = TtlCache(limits.cache_s, clock=clock, max_entries=512, max_bytes=CACHE_BYTES, size_of=_weight,
                              refresh_ahead=True)

    # -- who is asking -------------------------------------------------------------------

    def authenticate(self, token: str, client: str) -> "ApiKey":
        """The key of a Bearer `token` from address `client`, counted against its rate limit.

        401 for a missing, malformed, unknown, revoked or expired key (recorded, and counted
        by the throttle, tenant_api/limits.py); 429 with Retry-After, before any check, once
        `client` failed too often with the key id the token names, or that key id was guessed
        too often from addresses that never opened it; 429 instead of 401 for a failure while
        failures everywhere are over their ceiling; 429 when the key is over its rate.

        Whether the id is known or not, a token costs one query and one comparison of a
        SHA-256 (tenant_api.keys.verify_key), so the time of a 401 does not tell them apart."""
        from tenant_api.keys import KeyRefused, key_id_of, verify_key

        key_id = key_id_of(token)
        wait_s = self.throttle.blocked_for(client, key_id)
        if wait_s:
            current_request().key_id = key_id
            raise Problem(
                429, f"too many failed authentications with this key id from {client} or from everywhere; try again "
                     f"in {wait_s} s", headers={"Retry-After": str(wait_s)}, reason="auth-throttled")
        if not token:
            raise self._failed(client, key_id, _unauthorized(
                "no API key: send the header `Authorization: Bearer gpb_...` with the key your operator gave you "
                "(ask them for one if you have none)", "missing"))
        digest = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        key = self.keys.get(digest)
        if key is None:
            try:
                key = self.reads.run(lambda db: verify_key(db, token, now=self.now()))
            except KeyRefused as exc:
                current_request().key_id = exc.key_id
                raise self._failed(client, key_id, _unauthorized(str(exc), exc.reason)) from None
            self.keys.put(digest, key)
        elif key.expires_at is not None and key.expires_at <= self.now():  # expired while cached
            self.keys.drop(digest)
            raise self._failed(client, key_id, _unauthorized(_REFUSED["expired"], "expired"))
        self.throttle.succeeded(client, key.id)
        current_request().key = key
        wait_s = self.rate.take(key.id)
        if wait_s:
            raise Problem(429, f"more than {self.limits.rate_per_s:g} requests per second with this key; "
                                             f"try again in {wait_s} s", headers={"Retry-After": str(wait_s)},
                                        reason="rate-limited")
        return key

    def _failed(self, client: str, key_id: str, refusal: Problem) -> Problem:
        """Count a failed authentication; the answer: `refusal`, or 429 past the ceiling of failures."""
        self.throttle.failed(client, key_id)
        wait_s = self.throttle.over_ceiling()
        if wait_s:
            return Problem(429, f"too many failed authentications on this server; a valid key works, a wrong one "
                                f"is refused for {wait_s} s more", headers={"Retry-After": str(wait_s)},
                           reason="auth-ceiling")
        return refusal

    def tenant_for(self, key: "ApiKey", requested: str | None) -> str:
        """The tenant a request reads: a tenant key's own (naming a tenant is refused, even its
        own, so that a client cannot come to rely on it); an operator key's choice, which it must make."""
        if key.role != "operator":
            if requested is not None:
                raise bad_param("tenant", "only operator keys choose the tenant; a tenant key "
                                                        "reads its own tenant, leave the parameter out")
            return key.tenant
        if requested is None or requested == "":
            raise bad_param("tenant", "an operator key must name the tenant, e.g. ?tenant=t01")
        from schemas.ids import is_id

        if not is_id(requested):
            raise bad_param("tenant", "not a tenant id (letters, digits, '.', '_', '-'; at most 64)")
        current_request().tenant = requested
        return requested

    # -- answers -------------------------------------------------------------------------

    def me(self, key: "ApiKey") -> dict:
        """The key's tenant, its display name, the key's id, role, label and expiry."""
        from billing.tenants import find_tenant

        name = ""
        if key.tenant:
            found = self.cache.get_or_build(("tenant", key.tenant), lambda: self.reads.run(
                lambda db: find_tenant(db, key.tenant)))
            name = found.display_name if found else ""
        return {"tenant": key.tenant or None, "display_name": name, "key_id": key.id, "role": key.role,
                "label": key.label, "expires_at": _iso(key.expires_at), "created_at": _iso(key.created_at)}

    def current(self, key: "ApiKey", tenant: str) -> "CurrentUsage":
        """Month-to-date usage and the estimated total (billing.current_usage), at most
        `limits.cache_s` old (its `newest_data_at` says how fresh)."""
        from billing.current_usage import current_usage

        return self.cache.get_or_build(("current", tenant), lambda: self._read_rules(
            lambda db, rules: current_usage(db, rules, tenant, now=self.now())))

    def balance(self, key: "ApiKey", tenant: str) -> "Balance":
        """The tenant's prepaid balance (billing.balances): top-ups less invoices less the estimates
        of what is not invoiced yet, the budget's used share, the last hour's burn and the runway;
        at most `limits.cache_s` old. 404 for a tenant that is not registered (an operator's typo)."""
        from billing.balances import balance

        try:
            return self.cache.get_or_build(("balance", tenant), lambda: self._read_rules(
                lambda db, rules: balance(db, rules, tenant, now=self.now())))
        except NotFound:
            raise Problem(404, f"no registered tenant {_shown(tenant)}", reason="no-tenant") from None

    def live(self, key: "ApiKey", tenant: str) -> "LivePosition | None":
        """The stream's figures of the tenant (billing.live_spend): month to date, balance and
        runway as the spend tracker priced them at most a minute ago; None when it has not."""
        from billing.live_spend import live_position

        return self.reads.run(lambda db: live_position(db, tenant, now=self.now()))

    def daily(self, key: "ApiKey", tenant: str, period: str) -> "list[DailyUsage]":
        """Per day of `period`: GPU-hours, rent, electricity, spend (for the page's chart)."""
        from billing.current_usage import daily_usage

        period = self._period(period)
        return self.cache.get_or_build(("daily", tenant, period), lambda: self._read_rules(
            lambda db, rules: daily_usage(db, rules, tenant, period)))

    def invoices(self, key: "ApiKey", tenant: str) -> list[dict]:
        """The tenant's issued and voided invoices (never drafts), newest period first: number,
        period, status, issued_at, currency, subtotal, credit_used, net, tax, total (money as
        strings with two decimals), what it replaces and what replaced it ("" for none), its
        credit notes' numbers, and how it is paid (billing.tenant_invoices)."""
        from billing.tenant_invoices import tenant_invoices

        return self.cache.get_or_build(("invoices", tenant), lambda: self._read_rules(
            lambda db, rules: tenant_invoices(db, tenant, rules, now=self.now())))

    def payments(self, key: "ApiKey", tenant: str) -> list[dict]:
        """The tenant's payments (its top-ups too), newest first: ref, amount, method, received_on, the
        allocations by invoice, what is held unapplied, reversed_on (billing.tenant_invoices)."""
        from billing.tenant_invoices import tenant_payments

        return self.cache.get_or_build(("payments", tenant), lambda: self.reads.run(
            lambda db: tenant_payments(db, tenant)))

    def account(self, key: "ApiKey", tenant: str) -> "Account":
        """What the tenant's issued invoices still ask today, the part past due, and the credit it holds."""
        from billing.tenant_invoices import tenant_account

        return self.cache.get_or_build(("account", tenant), lambda: self._read_rules(
            lambda db, rules: tenant_account(db, rules, tenant, now=self.now())))

    def statement(self, key: "ApiKey", tenant: str, start: str | None, end: str | None) -> "StatementDocument":
        """The tenant's statement of account from `start` to `end` (YYYY-MM-DD, both included, billing
        time zone) with the aging as of `end` (reports.statement.statement_document, as `gpubill statement`
        builds it). `end` defaults to today, `start` to the first day of `end`'s month; 400 (naming it)
        for a malformed or impossible date, or `start` after `end`; 404 for a tenant neither registered
        nor with any document (an operator's typo)."""
        from billing.accounts import today
        from reports.statement import statement_document

        rules = self.rules_provider()
        end_on = self._date("to", end) if end is not None else today(rules, self.now())
        start_on = self._date("from", start) if start is not None else end_on.replace(day=1)
        if start_on > end_on:
            raise bad_param("from", f"{start_on} is after to {end_on}" + (" (today: to left out)" if end is None else "")
                            + "; give from on or before to")
        try:
            return self.cache.get_or_build(("statement", tenant, start_on, end_on), lambda: self._read_rules(
                lambda db, rules: statement_document(db, rules, tenant, start_on, end_on)))
        except NotFound:
            raise Problem(404, f"no registered tenant {_shown(tenant)}", reason="no-tenant") from None

    def statement_download(self, key: "ApiKey", tenant: str, start: str | None, end: str | None, fmt: str | None,
                           lang: str | None = "en") -> Download:
        """The statement (`statement`'s range and refusals) as json, csv or pdf, byte for byte what
        `gpubill statement` writes (reports.render.render_statement), under the key's download slot."""
        from reports.render import render_statement

        fmt = self._choice("format", fmt, STATEMENT_FORMATS, default="json")
        lang = self._choice("lang", lang, _langs(), default="en")
        current_request().fmt = fmt
        document = self.statement(key, tenant, start, end)
        first, last = document.statement.start, document.statement.end
        with self._download_slot(key):
            body = self.cache.get_or_build(("statement-file", tenant, first, last, fmt, lang),
                                           lambda: render_statement(document, fmt, lang=lang))
        download = Download(body, MEDIA_TYPES[fmt], output_name("statement", tenant, f"{first}_{last}", fmt, lang=lang))
        self.recorder.downloaded(len(body))
        return download

    def today(self) -> "date":
        """Today in the billing time zone, by the service's clock."""
        from billing.accounts import today

        return today(self.rules_provider(), self.now())

    def credit_notes(self, key: "ApiKey", tenant: str) -> list[dict]:
        """The tenant's credit notes, newest first: number, the invoice it corrects, period,
        reason, issued_at and issue_date (the billing time zone's date), currency, subtotal,
        tax, total (what returns to the tenant, VAT included; strings with two decimals)."""
        from billing.settlement import issue_date
        from billing.tenant_invoices import tenant_credit_notes

        def read(db: Any, rules: Any) -> list[dict]:
            return [{**note, "issue_date": str(issue_date(rules, note["issued_at"]))}
                    for note in tenant_credit_notes(db, tenant)]

        return self.cache.get_or_build(("credit-notes", tenant), lambda: self._read_rules(read))

    def credits(self, key: "ApiKey", tenant: str) -> list:
        """What is left of the tenant's credit grants now (billing.settlement.credits_left), with
        each reason in Chinese where the rules give one (`reason_zh`)."""
        from billing.settlement import credits_left

        def read(db: Any, rules: Any) -> list:
            return [(c, rules.name_zh("credit", c.id)) for c in credits_left(db, rules, tenant, now=self.now())]

        return self.cache.get_or_build(("credits", tenant), lambda: self._read_rules(read))

    def brand(self, lang: str) -> str:
        """The seller's brand from the rules (billing.toml [seller]) in `lang`; "gpubill" without one."""
        seller = self.rules_provider().seller
        return (seller.text("brand", lang) if seller else None) or "gpubill"

    def usage_download(self, key: "ApiKey", tenant: str, period: str | None, fmt: str | None,
                       granularity: str | None = "day", lang: str | None = "en") -> Download:
        """The usage report of `tenant` for `period` as the CLI's `gpubill report usage` writes it."""
        from reports.render import render_usage
        from reports.usage_report import usage_report

        period = self._period(period)
        fmt = self._choice("format", fmt, USAGE_FORMATS, default="csv")
        granularity = self._choice("granularity", granularity, GRANULARITIES, default="day")
        if granularity == "hour" and fmt == "pdf":  # a 64-card month is ~47,000 rows: 1,100 pages, 8 s
            raise bad_param("granularity", "hourly rows come as csv, json or parquet; the PDF is daily (a month "
                                           "of hours runs to a thousand pages)")
        lang = self._choice("lang", lang, _langs(), default="en")
        record = current_request()
        record.period, record.fmt = period, fmt

        def build() -> bytes:
            report = self.cache.get_or_build(("usage", tenant, period, granularity), lambda: self._read_rules(
                lambda db, rules: usage_report(db, rules, tenant, period, granularity=granularity,
                                                   now=self.now())))
            return render_usage(report, fmt, lang=lang)

        with self._download_slot(key):
            body = self.cache.get_or_build(("usage-file", tenant, period, granularity, fmt, lang), build)
        kind = "usage" if granularity == "day" else "usage-hourly"
        download = Download(body, MEDIA_TYPES[fmt], output_name(kind, tenant, period, fmt, lang=lang))
        self.recorder.downloaded(len(body))
        return download

    def invoice_download(self, key: "ApiKey", tenant: str, number: str, fmt: str | None,
                         lang: str | None = "en") -> Download:
        """Invoice `number` of `tenant`; 404 — the same answer — when it does not exist, is
        malformed, or belongs to another tenant. By number: a voided invoice is that invoice,
        not the replacement its period now has."""
        from billing.tenant_invoices import invoice_period
        from reports.invoice_document import invoice_document
        from reports.render import render_invoice

        return self._document_download(
            key, tenant, number, fmt, lang, kind="invoice", pattern=INVOICE_NUMBER, missing=_no_invoice,
            period_of=lambda db: invoice_period(db, tenant, number),
            document=lambda db, rules: invoice_document(db, rules, tenant, number=number), render=render_invoice)

    def credit_note_download(self, key: "ApiKey", tenant: str, number: str, fmt: str | None,
                             lang: str | None = "en") -> Download:
        """Credit note `number` (CN-YYYY-NNNNNN) of `tenant` as json, csv or pdf; 404 — the same
        answer — when it does not exist, is malformed, or belongs to another tenant."""
        from billing.credit_notes import find_credit_note
        from reports.credit_note_document import credit_note_document
        from reports.render import render_credit_note

        def period_of(db: Any) -> str | None:
            try:
                return find_credit_note(db, number, tenant=tenant).period
            except NotFound:
                return None

        return self._document_download(
            key, tenant, number, fmt, lang, kind="credit-note", pattern=CREDIT_NOTE_NUMBER, missing=_no_credit_note,
            period_of=period_of,
            document=lambda db, rules: credit_note_document(db, rules, number, tenant=tenant),
            render=render_credit_note)

    def _document_download(self, key: "ApiKey", tenant: str, number: str, fmt: str | None, lang: str | None, *,
                           kind: str, pattern: re.Pattern, missing: Any, period_of: Any, document: Any,
                           render: Any) -> Download:
        """One numbered document of `tenant` (an invoice, a credit note) as json, csv or pdf: the
        number checked against `pattern`, its period read (`period_of`: None when it is not the
        tenant's), the document built and rendered once per format and language (cached), under
        the key's download slot and recorded. `missing()` is the one 404 of every refusal."""
        fmt = self._choice("format", fmt, INVOICE_FORMATS, default="json")
        lang = self._choice("lang", lang, _langs(), default="en")
        current_request().fmt = fmt
        if not isinstance(number, str) or not pattern.fullmatch(number):
            raise missing()
        with self._download_slot(key):
            period = self.cache.get_or_build((f"{kind}-period", tenant, number), lambda: self.reads.run(period_of))
            if period is None:
                raise missing()
            current_request().period = period

            def build() -> bytes:
                try:
                    built = self._read_rules(document)
                except NotFound:
                    raise missing() from None
                return render(built, fmt, lang=lang)

            body = self.cache.get_or_build((f"{kind}-file", tenant, number, fmt, lang), build)
        download = Download(body, MEDIA_TYPES[fmt], output_name(number, tenant, period, fmt, lang=lang))
        self.recorder.downloaded(len(body))
        return download

    # -- health --------------------------------------------------------------------------

    def ready(self) -> dict[str, str]:
        """What /readyz checks: the database answers, the rules are loaded, the access log is
        being written. Values are "ok" or why not."""
        checks = {}
        try:
            self.reads.run(lambda db: db.query("SELECT 1"), timeout_s=2.0)
            checks["database"] = "ok"
        except Exception as exc:  # noqa: BLE001 - any failure is "not ready", said in words
            checks["database"] = f"unreachable: {type(exc).__name__}: {str(exc)[:200]}"
        try:
            rules = self.rules_provider()
            checks["rules"] = "ok" if rules is not None else "not loaded"
        except Exception as exc:  # noqa: BLE001
            checks["rules"] = f"not loaded: {type(exc).__name__}: {str(exc)[:200]}"
        checks["access_log"] = self.recorder.health()
        return checks

    # -- helpers -------------------------------------------------------------------------

    def _read_rules(self, read: Callable[[Any, Any], Any]) -> Any:
        rules = self.rules_provider()
        return self.reads.run(lambda db: read(db, rules))

    def _period(self, period: str | None) -> str:
        """`period` checked: 400 when missing or not a month; 404 when it is one with no report."""
        if period is None or period == "":
            raise bad_param("period", "missing: give the billing period as YYYY-MM, e.g. period=2026-03")
        if not isinstance(period, str) or not PERIOD.fullmatch(period):
            raise bad_param("period", "not a month like 2026-03")
        from billing_rules.errors import BillingRulesError

        rules = self.rules_provider()
        try:
            lo, _ = rules.period_bounds(period)
        except (BillingRulesError, ValueError):
            # the rules' own words name the month after it (10000-01 for 9999-12): say what was sent
            raise _no_period(f"{period} is out of range: billing periods run from 0001-01 to 9999-11") from None
        if lo > self.now().timestamp():
            raise _no_period(f"{period} has not begun")
        return period

    def _date(self, param: str, value: str) -> "date":
        """`value` as a date: 400 naming `param` unless it is YYYY-MM-DD and a day of the calendar."""
        if not isinstance(value, str) or not DATE.fullmatch(value):
            raise bad_param(param, "not a date like 2026-03-01")
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise bad_param(param, f"{value} is not a day of the calendar") from None

    def _choice(self, param: str, value: str | None, allowed: tuple[str, ...], *, default: str) -> str:
        if value is None:
            return default
        if value not in allowed:
            raise bad_param(param, f"{_shown(value)} is not one of {', '.join(allowed)}")
        return value

    def _download_slot(self, key: "ApiKey"):
        slot = self.downloads.acquire(key.id)
        if slot is None:
            raise Problem(
                429, f"this key already has {self.limits.downloads_per_key} downloads in flight; wait for one to "
                     "finish", headers={"Retry-After": "1"}, reason="downloads-capped")
        return slot


_REFUSED = {"expired": "the key has expired: ask the operator for a new one"}


def _unauthorized(detail: str, reason: str) -> Problem:
    return Problem(401, detail, headers={"WWW-Authenticate": 'Bearer realm="gpubill"'}, reason=reason)


def _no_period(why: str) -> Problem:
    """A well-formed month with no report (not begun, or outside the calendar the rules bound):
    404, not 400 — the request is as the schema says, there is nothing there (yet)."""
    return Problem(404, f"period: {why}: there is no report of it", param="period", reason="no-period")


def _no_invoice() -> Problem:
    return Problem(404, "no such invoice: see GET /v1/invoices for your invoices' numbers", reason="not-found")


def _no_credit_note() -> Problem:
    return Problem(404, "no such credit note: see GET /v1/credit-notes for your credit notes' numbers",
                   reason="not-found")


def _shown(value: str) -> str:
    """A parameter's value quoted in a message: at most 40 characters, nothing invisible."""
    text = "".join(c if c.isprintable() else "?" for c in value[:40])
    return repr(text + ("…" if len(value) > 40 else ""))


def _langs() -> tuple[str, ...]:
    from reports.render.i18n import LANGS

    return tuple(LANGS)


def _weight(value: Any) -> int:
    """About how much memory a cached answer holds (files: their bytes; reports: their rows)."""
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    rows = getattr(value, "rows", None)
    return len(rows) * ROW_BYTES if rows is not None else 1024


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
