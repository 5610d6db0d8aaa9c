"""A bank statement's lines matched to invoices and tenants (issue 38; docs/bank_statements.md has the
table): an invoice number in the remittance, else a registered tenant id in it as a whole token —
never guessed (not from the payer, not from part of a word). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Literal, Mapping, Sequence

from schemas.bank_statement import BankLine

__all__ = ["Match", "match_lines"]


@dataclass(frozen=True)
class Match:
    """Whose money a receipt is, and why we think so (or why we do not)."""

    line: BankLine
    tenant: str | None  # None when unmatched
    invoices: tuple[str, ...]  # the issued invoices named in the remittance, in the order named
    how: Literal["invoice", "tenant", "unmatched"]
    why: str  # one line


_TOKEN = re.compile(r"[A-Za-z0-9._-]+")
_INVOICE = re.compile(r"[Gg][Bb]-[0-9]{4}-[0-9]{6}")
# Full-width ASCII (what a Chinese input method types: ＧＢ－２０２６－０００００３) read as ASCII.
_FULL_WIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def _named(remittance: str) -> tuple[list[str], list[str]]:
    """The invoice numbers (upper-cased "GB") and the other candidate tokens of a remittance, each
    once, in the order written. A token is a run of the id syntax's characters; dots around it
    (a full stop after it) are not part of it, though a token equal to an id as written still is."""
    numbers: list[str] = []
    words: list[str] = []
    for token in _TOKEN.findall(remittance.translate(_FULL_WIDTH)):
        token = token.lstrip(".")
        bare = token.rstrip(".")
        if _INVOICE.fullmatch(bare):
            number = "GB" + bare[2:]
            if number not in numbers:
                numbers.append(number)
            continue
        for word in (token, bare):
            if word and word not in words:
                words.append(word)
    return numbers, words


def _listed(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _not_issued(unknown: Sequence[str]) -> str:
    return f"{_listed(unknown)} {'is not an issued invoice' if len(unknown) == 1 else 'are not issued invoices'}"


def _match(line: BankLine, invoices: Mapping[str, str], tenants: frozenset[str]) -> Match:
    numbers, words = _named(line.remittance)
    known = [n for n in numbers if n in invoices]
    unknown = [n for n in numbers if n not in invoices]
    named_tenants = [w for w in words if w in tenants]
    aside = f"; {_not_issued(unknown)}" if unknown else ""
    if known:
        owners: list[str] = []
        for number in known:
            if invoices[number] not in owners:
                owners.append(invoices[number])
        if len(owners) > 1:
            of = " and ".join(f"{owner} ({', '.join(n for n in known if invoices[n] == owner)})" for owner in owners)
            return Match(line, None, (), "unmatched", f"names invoices of tenants {of}: ambiguous")
        owner = owners[0]
        others = [t for t in named_tenants if t != owner]
        if others:
            return Match(line, None, (), "unmatched",
                         f"names {_listed(known)} of {owner} but also tenant {_listed(others)}: ambiguous")
        return Match(line, owner, tuple(known), "invoice", f"remittance names {_listed(known)} of {owner}{aside}")
    if len(named_tenants) == 1:
        return Match(line, named_tenants[0], (), "tenant", f"remittance names tenant {named_tenants[0]}{aside}")
    if named_tenants:
        return Match(line, None, (), "unmatched", f"names tenants {_listed(named_tenants)}: ambiguous{aside}")
    if unknown:
        return Match(line, None, (), "unmatched", f"{_not_issued(unknown)} and no registered tenant id is in the remittance")
    if not line.remittance:
        return Match(line, None, (), "unmatched", "the remittance is empty")
    return Match(line, None, (), "unmatched", "no invoice number or registered tenant id in the remittance")


def match_lines(lines: Sequence[BankLine], invoices: Mapping[str, str], tenants: Collection[str]) -> list[Match]:
    """Each line's Match, in order. `invoices`: issued invoice number -> its tenant; `tenants`:
    the registered tenant ids. Only the remittance is read — never the payer, never a part of a
    word — and a line is matched only when it names one tenant without contradiction:

    1. Invoice numbers (GB-YYYY-NNNNNN, a token of their own; "gb-" read as "GB-") that are
       issued, all of one tenant, and no other registered tenant id named beside them ->
       how "invoice", that tenant, those numbers in the order named. Issued numbers of several
       tenants, or of one tenant and another tenant's id -> unmatched (ambiguous).
    2. Else, tokens equal to a registered tenant id (case-sensitive): exactly one -> how
       "tenant"; several -> unmatched (ambiguous).
    3. Else unmatched. Numbers that are not issued invoices never match; `why` names them.

    Tokens are runs of ASCII letters, digits, '.', '_', '-' (full-width forms read as ASCII);
    anything else separates them, so "acme公司" names acme but "acme2" and "acme_ltd" do not.
    A full stop after a token is read as punctuation ("acme." names acme, and acme. too)."""
    registered = frozenset(tenants)
    return [_match(line, invoices, registered) for line in lines]
