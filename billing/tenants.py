"""The tenant registry: who is a customer of record, by name and status (migration 0011),
and who buys on its invoices: legal name, tax id, address and e-mail (migration 0019).

A reading names its tenant by an id in the id syntax (schemas/ids.py), and any such id is
rated. Only a *registered* id is a customer of record:

- the trial credit (billing.toml `new_tenant_credit`) goes to a tenant that is registered
  and active when the invoice run runs (`trial_tenants`; billing/invoicing.py asks);
- a suspended tenant is still rated and invoiced in full (it owes what it used), without
  the trial credit on invoices issued while it is suspended; resumed, whatever it had not
  spent of the trial is usable again (spending is read from its invoices);
- a well-formed id that is not registered is rated, kept and invoiced like any other, only
  without the trial credit; `unregistered_usage` lists those of a period, so the operator
  can register them (`gpubill tenant unknown`, then `gpubill tenant add`).

Contract credits named per tenant in contracts.toml are granted whatever the registry says:
an explicit contract is already the operator's registration of intent.

The buyer block an invoice prints comes from the registry: `legal_name` and `address` in
any script (checked like a display name, at most 200 and 300 characters), `tax_id` in upper
case letters, digits and '-' (a 统一社会信用代码 must pass its check character) and one
plain `email` address. Each is '' until given (rows from before migration 0019 read '').

Every write checks the id (`check_tenant_id`), the display name and note
(`check_display_name`, `check_note`) and the buyer fields (`check_legal_name`,
`check_tax_id`, `check_address`, `check_email`) before anything reaches the database;
values travel as query parameters. Nothing is ever deleted: each change (`set_status`,
`update_tenant`) writes the whole row again with a later `updated_at`, and the latest row
is the tenant.

    BillingError                       (billing/errors.py)
    ├── NotFound                       suspend / resume / update of an id that is not registered
    └── TenantRefused                  base of this module's refusals
        ├── InvalidTenant              an id, display name, note or buyer field that may not be stored
        └── TenantExists               `add` of a registered id under another display name or
                                       buyer field (`update_tenant` is how one changes)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from billing import books
from billing.errors import BillingError, NotFound
from billing_rules import build_invoice
from billing_rules.parties import looks_like_uscc, uscc_problem
from schemas.books import TenantFact, TenantRow
from schemas.ids import MAX_ID_LEN, is_id
from usage.by_tenant import usage_by_tenant
from usage.rated import rated_source

ACTIVE, SUSPENDED = "active", "suspended"
STATUSES = (ACTIVE, SUSPENDED)
MAX_NAME_CHARS = 100
MAX_NOTE_CHARS = 200
MAX_LEGAL_NAME_CHARS = 200
MAX_ADDRESS_CHARS = 300
MIN_TAX_ID_CHARS, MAX_TAX_ID_CHARS = 4, 40
MAX_EMAIL_CHARS = 254  # RFC 5321's limit on a path, less its angle brackets
# Format characters that are part of spelling: ZWNJ in Persian and Indic scripts, ZWJ in
# Indic scripts and emoji. Every other format character (bidi overrides and isolates,
# zero-width space, BOM …) can disguise a name in a terminal or on a PDF, and is refused.
_SPELLING_FORMAT_CHARS = frozenset("\u200c\u200d")
# Control, surrogate, private-use, unassigned, line and paragraph separator characters.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Co", "Cn", "Zl", "Zp"})

BUYER_FIELDS = ("legal_name", "tax_id", "address", "email")
COLUMNS = ("tenant", "display_name", "status", "created_at", "updated_at", "note", *BUYER_FIELDS)
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM tenants FINAL"


class TenantRefused(BillingError):
    """Base of the registry's refusals: the message says what to change."""


class InvalidTenant(TenantRefused):
    """An id outside the id syntax, or a display name, note or buyer field that may not be stored."""


class TenantExists(TenantRefused):
    """`add_tenant` for an id already registered under another display name or buyer field."""


@dataclass(frozen=True)
class Tenant:
    """One registered tenant, as its latest row says."""

    tenant: str
    display_name: str
    status: str  # active | suspended
    created_at: datetime  # UTC
    updated_at: datetime  # UTC
    note: str = ""
    # The buyer on its invoices; '' where not given.
    legal_name: str = ""
    tax_id: str = ""
    address: str = ""
    email: str = ""


@dataclass(frozen=True)
class UnregisteredTenant:
    """A tenant id with rated usage in a period and no registration: what registering it is about."""

    tenant: str
    well_formed: bool  # in the id syntax, so it can be registered (rated data from before the syntax may not be)
    rented_seconds: int  # GPU-seconds rented in the period
    energy_mj: int  # IT energy allocated to it, mJ
    charges: Decimal  # rent + electricity − discounts of the period, before credits and VAT, in CNY


# ------------------------------------------------------------------------- checks (pure)


def check_tenant_id(value: object) -> str:
    """`value` when it is an id in the id syntax; InvalidTenant with a one-line reason if not."""
    if is_id(value):
        return value  # type: ignore[return-value]
    if not isinstance(value, str) or not value:
        raise InvalidTenant("tenant id is empty: give an ASCII letter or digit, then letters, digits, '.', '_' or '-'")
    shown = shown_value(value)
    if len(value) > MAX_ID_LEN:
        raise InvalidTenant(f"tenant id {shown} is {len(value)} characters long: at most {MAX_ID_LEN}")
    for ch in value:
        if not ch.isascii():
            hint = " (a look-alike letter is not the same id)" if ch.isalpha() else ""
            raise InvalidTenant(f"tenant id {shown} has the non-ASCII character {_named(ch)}: "
                                f"ids are ASCII letters, digits, '.', '_' and '-'{hint}")
    raise InvalidTenant(f"tenant id {shown} is not an id: an ASCII letter or digit, then up to "
                        f"{MAX_ID_LEN - 1} letters, digits, '.', '_' or '-'")


def check_display_name(value: str) -> str:
    """The name as stored: NFC, without surrounding blanks, 1 to MAX_NAME_CHARS characters of
    any script, none of them a control, bidi or other invisible formatting character."""
    return checked_text("display name", value, MAX_NAME_CHARS, empty_ok=False)


def check_note(value: str) -> str:
    """A note as stored: like a display name, but may be empty and up to MAX_NOTE_CHARS characters."""
    return checked_text("note", value, MAX_NOTE_CHARS, empty_ok=True)


def check_legal_name(value: str) -> str:
    """The buyer's legal name as stored: checked like a display name, may be empty (not given),
    at most MAX_LEGAL_NAME_CHARS characters."""
    return checked_text("legal name", value, MAX_LEGAL_NAME_CHARS, empty_ok=True)


def check_address(value: str) -> str:
    """The buyer's address as stored, in one line: checked like a display name, may be empty,
    at most MAX_ADDRESS_CHARS characters."""
    return checked_text("address", value, MAX_ADDRESS_CHARS, empty_ok=True)


def check_tax_id(value: str) -> str:
    """The buyer's tax id as stored: '' (not given) or MIN_TAX_ID_CHARS to MAX_TAX_ID_CHARS
    upper-case ASCII letters, digits and '-', beginning and ending with a letter or digit.
    One that has the shape of a 统一社会信用代码 (18 letters and digits) must pass its check
    character. Surrounding whitespace is dropped; a letter is never changed (a lower-case one
    is refused, not upper-cased: the operator says which code is meant)."""
    if not isinstance(value, str):
        raise InvalidTenant("tax id must be text")
    code = value.strip()
    if not code:
        return ""
    shown = shown_value(code)
    for position, ch in enumerate(code, start=1):
        if not (ch.isascii() and (ch.isalnum() or ch == "-")):
            raise InvalidTenant(f"tax id {shown} has {_named(ch)} at character {position}: "
                                "a tax id is ASCII letters A-Z, digits and '-'")
    if not MIN_TAX_ID_CHARS <= len(code) <= MAX_TAX_ID_CHARS:
        raise InvalidTenant(f"tax id {shown} is {len(code)} characters long: "
                            f"{MIN_TAX_ID_CHARS} to {MAX_TAX_ID_CHARS}")
    if code != code.upper():
        raise InvalidTenant(f"tax id {shown} has lower-case letters: give it in upper case, {code.upper()}")
    if code[0] == "-" or code[-1] == "-":
        raise InvalidTenant(f"tax id {shown} begins or ends with '-': give the code as issued")
    if looks_like_uscc(code):
        problem = uscc_problem(code)
        if problem is not None:
            raise InvalidTenant(f"tax id: {problem}")
    return code


# One plain address: an allow-list, not a parser of RFC 5322 (quoted local parts, comments
# and address lists are what header injection is made of, and no invoice needs them).
_EMAIL_LOCAL = re.compile(r"[A-Za-z0-9!#$%&*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&*+/=?^_`{|}~-]+)*")
_DOMAIN_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_TOP_LEVEL = re.compile(r"[A-Za-z]{2,63}|xn--[A-Za-z0-9-]{1,59}")


def check_email(value: str) -> str:
    """The buyer's e-mail as stored: '' (not given) or one address local@domain.tld in ASCII,
    at most MAX_EMAIL_CHARS characters, without spaces, quotes, angle brackets or line
    breaks. Surrounding blanks are dropped; nothing else is changed (case included)."""
    if not isinstance(value, str):
        raise InvalidTenant("e-mail must be text")
    address = value.strip(" \t")
    if not address:
        return ""
    shown = shown_value(address)
    if len(address) > MAX_EMAIL_CHARS:
        raise InvalidTenant(f"e-mail {shown} is {len(address)} characters long: at most {MAX_EMAIL_CHARS}")
    for position, ch in enumerate(address, start=1):
        if not ch.isascii() or not ch.isprintable() or ch.isspace():
            raise InvalidTenant(f"e-mail {shown} has {_named(ch)} at character {position}: give one address, "
                                "ASCII, without spaces or line breaks (an internationalised domain in its xn-- form)")
    if address.count("@") != 1:
        raise InvalidTenant(f"e-mail {shown} has {address.count('@')} '@': give one address, local@domain.tld")
    local, domain = address.split("@")
    if not local or len(local) > 64 or not _EMAIL_LOCAL.fullmatch(local):
        raise InvalidTenant(f"e-mail {shown}: the part before '@' must be 1-64 letters, digits or "
                            "!#$%&*+/=?^_`{|}~- in dot-separated words (no quotes, angle brackets, commas)")
    labels = domain.split(".")
    if (len(labels) < 2 or not all(_DOMAIN_LABEL.fullmatch(label) for label in labels)
            or not _TOP_LEVEL.fullmatch(labels[-1])):
        raise InvalidTenant(f"e-mail {shown}: the part after '@' must be a domain such as example.com "
                            "(letters, digits and '-' in dot-separated labels)")
    return address


_BUYER_CHECKS = {"legal_name": check_legal_name, "tax_id": check_tax_id, "address": check_address,
                 "email": check_email}


def check_buyer(**fields: str | None) -> dict[str, str]:
    """The given buyer fields (legal_name, tax_id, address, email; None is not given) as stored,
    each checked; InvalidTenant with a one-line reason for the first that may not be."""
    unknown = set(fields) - set(BUYER_FIELDS)
    if unknown:
        raise TypeError(f"not buyer fields: {', '.join(sorted(unknown))}")
    return {name: _BUYER_CHECKS[name](value) for name, value in fields.items() if value is not None}


def checked_text(what: str, value: str, limit: int, *, empty_ok: bool) -> str:
    if not isinstance(value, str):
        raise InvalidTenant(f"{what} must be text")
    text = unicodedata.normalize("NFC", value).strip()
    for position, ch in enumerate(text, start=1):
        category = unicodedata.category(ch)
        if category in _REFUSED_CATEGORIES or (category == "Cf" and ch not in _SPELLING_FORMAT_CHARS):
            raise InvalidTenant(f"{what} has {_named(ch)} at character {position}: control and invisible "
                                "formatting characters are refused (they can disguise a name)")
    if not text and not empty_ok:
        raise InvalidTenant(f"{what} is empty: give the tenant's name, in any script")
    if len(text) > limit:
        raise InvalidTenant(f"{what} is {len(text)} characters long: at most {limit}")
    return text


def shown_value(value: str) -> str:
    """`value` safe to print in one line: ASCII escapes for everything else, at most 40 characters."""
    return ascii(value[:40]) + ("…" if len(value) > 40 else "")


def _named(ch: str) -> str:
    fallback = "a control character" if unicodedata.category(ch) == "Cc" else "unnamed"
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, fallback)})"


# ------------------------------------------------------------------------- SQL (pure)


def tenant_sql(*, one: bool = False, status: str | None = None) -> str:
    """The latest row of every registered tenant (of `status` only; with `one`, of {t:String})."""
    where = [condition for condition, wanted in (("tenant = {t:String}", one), ("status = {s:String}", status))
             if wanted]
    return _SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY tenant"


def unregistered_sql(source: str) -> str:
    """`source` (a usage.rated relation) restricted to tenant ids that are not registered.

    '' (unallocated energy) is nobody's and not listed. Any registered id counts, whatever
    its status: a suspended tenant is known."""
    return f"(SELECT * FROM {source} WHERE tenant != '' AND tenant NOT IN (SELECT tenant FROM tenants))"


# ------------------------------------------------------------------------- reads and writes


def list_tenants(db: Any, *, status: str | None = None) -> list[Tenant]:
    """Every registered tenant (of `status` only), by id."""
    return [_tenant(row) for row in db.query(tenant_sql(status=status), {"s": status} if status else None)]


def find_tenant(db: Any, tenant: str) -> Tenant | None:
    """The registered tenant `tenant`, or None."""
    rows = db.query(tenant_sql(one=True), {"t": check_tenant_id(tenant)})
    return _tenant(rows[0]) if rows else None


_INVOICED_PERIODS_SQL = ("SELECT DISTINCT period FROM invoices FINAL WHERE tenant = {t:String} AND status != 'draft' "
                         "ORDER BY period")


def invoiced_periods(db: Any, tenant: str) -> list[str]:
    """The periods `tenant` has an issued (or voided) invoice for, oldest first."""
    return [row[0] for row in db.query(_INVOICED_PERIODS_SQL, {"t": tenant})]


def unknown_tenant(tenant: str) -> NotFound:
    """The one refusal of every per-tenant command for an id that is neither registered nor invoiced."""
    return NotFound(f"unknown tenant {shown_value(tenant)}: not registered and never invoiced "
                    "(`gpubill tenant list` lists the registered ones, `gpubill tenant unknown --period P` "
                    "those with usage only)")


def is_known(db: Any, tenant: str) -> bool:
    """True for a registered tenant or one with an invoice (an unregistered id that was rated and billed)."""
    registered = is_id(tenant) and find_tenant(db, tenant) is not None  # an id outside the syntax is never registered
    return registered or bool(invoiced_periods(db, tenant))


def registered_tenants(db: Any) -> frozenset[str]:
    """Every registered id, whatever its status."""
    return frozenset(row[0] for row in db.query("SELECT DISTINCT tenant FROM tenants"))


def trial_tenants(db: Any) -> frozenset[str]:
    """The ids that receive billing.toml's new-tenant credit now: registered and active."""
    return frozenset(t.tenant for t in list_tenants(db, status=ACTIVE))


def add_tenant(db: Any, tenant: str, display_name: str, *, note: str = "", legal_name: str = "",
               tax_id: str = "", address: str = "", email: str = "",
               now: datetime | None = None) -> tuple[Tenant, bool]:
    """Register `tenant` as active, with its buyer fields ('' = not given); returns (the
    tenant, whether this call registered it).

    Idempotent: adding a registered id with the same display name, and no buyer field that
    differs from the registered one, changes nothing (its status stays what it is) and
    returns (it, False), so provisioning can be re-run; a buyer field left '' is not stated,
    so a re-run without them is the same add. A registered id under another display name,
    or with a stated buyer field that differs, is TenantExists: two customers claiming one
    id, or a typo, must be noticed, not silently renamed (`update_tenant` changes a tenant).
    """
    tenant, name, note = check_tenant_id(tenant), check_display_name(display_name), check_note(note)
    buyer = check_buyer(legal_name=legal_name, tax_id=tax_id, address=address, email=email)
    existing = find_tenant(db, tenant)
    if existing is not None:
        if existing.display_name != name:
            raise TenantExists(f"tenant {tenant} is already registered as {existing.display_name!r} "
                               f"({existing.status}); it was not changed")
        differs = [field for field, value in buyer.items() if value and value != getattr(existing, field)]
        if differs:
            shown = ", ".join(_FIELD_NAMES[field] for field in differs)
            raise TenantExists(f"tenant {tenant} is already registered with another {shown}; it was not changed "
                               f"(change it with `gpubill tenant update {tenant}`)")
        return existing, False
    at = utc_ms(now)
    added = Tenant(tenant, name, ACTIVE, at, at, note, **buyer)
    _write(db, added, "tenant_registered")
    return added, True


def update_tenant(db: Any, tenant: str, *, display_name: str | None = None, legal_name: str | None = None,
                  tax_id: str | None = None, address: str | None = None, email: str | None = None,
                  note: str = "", now: datetime | None = None) -> tuple[Tenant, bool]:
    """Change registered `tenant`'s display name and buyer fields; returns (the tenant,
    whether it changed).

    None leaves a field as it is; '' clears a buyer field (a display name cannot be empty).
    Every value is checked before anything is read or written. NotFound when the id is not
    registered. When no field differs, nothing is written and the registered tenant is
    returned with False (the note alone is not a change). Otherwise the whole row is written
    again, status and creation kept, with an `updated_at` strictly later than the row it
    replaces; the note replaces the last one when given.
    """
    tenant, note = check_tenant_id(tenant), check_note(note)
    wanted = check_buyer(legal_name=legal_name, tax_id=tax_id, address=address, email=email)
    if display_name is not None:
        wanted["display_name"] = check_display_name(display_name)
    existing = find_tenant(db, tenant)
    if existing is None:
        raise NotFound(f"tenant {tenant} is not registered; register it with `gpubill tenant add {tenant} --name NAME`")
    if all(getattr(existing, field) == value for field, value in wanted.items()):
        return existing, False
    at = max(utc_ms(now), existing.updated_at + timedelta(milliseconds=1))
    changed = replace(existing, **wanted, updated_at=at, note=note or existing.note)
    _write(db, changed, "tenant_updated")
    return changed, True


def changed_fields(before: Tenant, after: Tenant) -> list[str]:
    """What an update changed, as people read it: "display name", "legal name", "tax id", …"""
    return [label for field, label in _FIELD_NAMES.items() if getattr(before, field) != getattr(after, field)]


_FIELD_NAMES = {"display_name": "display name", "legal_name": "legal name", "tax_id": "tax id",
                "address": "address", "email": "e-mail"}


def set_status(db: Any, tenant: str, status: str, *, note: str = "", now: datetime | None = None) -> tuple[Tenant, bool]:
    """Make registered `tenant` `status`; returns (the tenant, whether it changed). NotFound
    when it is not registered. The note replaces the last one when given."""
    if status not in STATUSES:
        raise InvalidTenant(f"status {shown_value(status)} is not one of {', '.join(STATUSES)}")
    tenant, note = check_tenant_id(tenant), check_note(note)
    existing = find_tenant(db, tenant)
    if existing is None:
        raise NotFound(f"tenant {tenant} is not registered; register it with `gpubill tenant add {tenant} --name NAME`")
    if existing.status == status:
        return existing, False
    # Strictly later than the row it replaces, so the replacement wins even within a millisecond.
    at = max(utc_ms(now), existing.updated_at + timedelta(milliseconds=1))
    changed = replace(existing, status=status, updated_at=at, note=note or existing.note)
    _write(db, changed, "tenant_suspended" if status == SUSPENDED else "tenant_resumed")
    return changed, True


def unregistered_usage(db: Any, rules: Any, period: str) -> list[UnregisteredTenant]:
    """Tenant ids with rated usage in `period` that are not registered, most charges first.

    Read exactly as the invoice run reads (usage/rated.py); the charges are what
    `billing_rules.build_invoice` makes of the usage, before credits and VAT.
    """
    rules.period_bounds(period)  # validates the period
    source, params = rated_source(db, rules, period)
    rent, energy = usage_by_tenant(db, (unregistered_sql(source), params))
    found = []
    for tenant in set(rent) | set(energy):
        draft = build_invoice(tenant, period, rent[tenant], energy[tenant], (), Decimal(0), Decimal(0))
        found.append(UnregisteredTenant(
            tenant=tenant, well_formed=is_id(tenant), rented_seconds=sum(u.seconds for u in rent[tenant]),
            energy_mj=sum(u.energy_mj for u in energy[tenant]), charges=draft.net,
        ))
    return sorted(found, key=lambda u: (-u.charges, -u.rented_seconds, u.tenant))


def _write(db: Any, tenant: Tenant, kind: str) -> None:
    """Record the change on the books (billing/books.py): the whole row, as the registry keeps it."""
    row = TenantRow(**{column: getattr(tenant, column) for column in COLUMNS})
    books.record(db, TenantFact(kind=kind, tenant=row))


def _tenant(row: Iterable[Any]) -> Tenant:
    tenant, name, status, created, updated, note, legal_name, tax_id, address, email = row
    return Tenant(tenant, name, status, utc_ms(created), utc_ms(updated), note,
                  legal_name=legal_name, tax_id=tax_id, address=address, email=email)


def utc_ms(moment: datetime | None) -> datetime:
    """`moment` (now when None) as an aware UTC datetime to the millisecond, as the table keeps it."""
    moment = moment or datetime.now(UTC)
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)
