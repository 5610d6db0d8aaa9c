"""`gpubill credit-note create|list|show`: corrections of issued invoices (billing/credit_notes.py)."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import check_format, check_period, connect, emit, err, out, read_rules, terminal_text
from gpubill.cli.report import check_choice
from gpubill.config import load_settings
from gpubill.errors import GpubillError
from reports.render.i18n import LANGS

app = typer.Typer(help="Credit notes: corrections of issued invoices, their own gap-free series CN-YYYY-NNNNNN.",
                  no_args_is_help=True)


def parse_lines(specs: list[str]) -> dict[int, Decimal]:
    """`--line K=AMOUNT` options as {K: amount}; a one-line error for a malformed or repeated one."""
    from billing.credit_notes import parse_amount

    lines = {}
    for spec in specs:
        key, sep, amount = spec.partition("=")
        if not sep or not key.strip().isdigit() or len(key.strip()) > 4:
            raise GpubillError(f"--line {spec!r}: write it as K=AMOUNT, K the invoice's line number (1, 2, …) "
                               "and AMOUNT before tax, e.g. --line 1=25.00")
        number = int(key)
        if number in lines:
            raise GpubillError(f"--line {number} is given twice")
        lines[number] = parse_amount(amount, f"--line {number}")
    return lines


@app.command("create")
def credit_note_create(
    invoice: str = typer.Option(..., "--invoice", help="The issued invoice's number (GB-YYYY-NNNNNN)."),
    reason: str = typer.Option(..., "--reason", help="price_error, usage_error, duplicate, goodwill, void or rerate."),
    note: str = typer.Option("", "--note", help="Free text kept on the credit note (one line, at most 500 characters)."),
    credit_all: bool = typer.Option(False, "--all", help="Credit everything still creditable on the invoice."),
    line: list[str] = typer.Option([], "--line", help="K=AMOUNT: credit AMOUNT (CNY before tax) of invoice line K; "
                                   "repeat for several lines."),
    refund: Optional[str] = typer.Option(None, "--refund", help="REF: pay back, out of band, the part beyond what "
                                         "the invoice still asks (recorded as refund REF) instead of holding it as "
                                         "the tenant's credit."),
    as_json: bool = typer.Option(False, "--json", help="Print the credit note as JSON."),
) -> None:
    """Issue a credit note: amounts before tax, VAT reversed at the invoice's rate, never more than is creditable.
    It first reduces what the invoice still asks; the rest is the tenant's credit or, with --refund, refunded."""
    from billing.balances import check_ref
    from billing.credit_notes import REASONS, create_credit_note

    check_choice("--reason", reason, REASONS)
    if credit_all == bool(line):
        raise GpubillError("say what to credit: --all, or one --line K=AMOUNT per invoice line (not both)")
    amounts = None if credit_all else parse_lines(line)  # checked before anything is opened
    refund = check_ref(refund) if refund is not None else None
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        made = create_credit_note(database, rules, invoice, reason, amounts, note=note, refund=refund,
                                  on_wait=lambda message: err.print(terminal_text(message), highlight=False))
    effect = _effect(made)
    if as_json:
        _print_json([{**_summary(made), **{k: f"{v:.2f}" for k, v in effect.items()}, "refund_ref": refund or ""}])
        return
    went = [f"{effect['to_invoice']:.2f} to {terminal_text(made.invoice)}"] if effect["to_invoice"] else \
        [f"nothing to {terminal_text(made.invoice)} (it asked nothing more)"]
    if effect["refunded"]:
        went.append(f"{effect['refunded']:.2f} refunded as {terminal_text(refund)}")
    if effect["credit"]:
        went.append(f"{effect['credit']:.2f} held as {terminal_text(made.tenant)}'s credit")
    out.print(f"{terminal_text(made.number)} credits {terminal_text(made.invoice)}: {made.subtotal:.2f} + VAT "
              f"{made.tax:.2f} = {made.total:.2f} {made.currency}: {'; '.join(went)}", highlight=False)


def _effect(made) -> dict:
    """What credit note `made` did to the account: to its invoice, refunded, held as credit (they add up to its total)."""
    to_invoice, refunded = made.to_invoice or Decimal("0.00"), made.refunded or Decimal("0.00")
    return {"to_invoice": to_invoice, "refunded": refunded, "credit": made.total - to_invoice - refunded}


@app.command("list")
def credit_note_list(
    tenant: Optional[str] = typer.Option(None, help="Only this tenant."),
    period: Optional[str] = typer.Option(None, help="Only notes on invoices of this period YYYY-MM."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array."),
) -> None:
    """The credit notes, in number order."""
    from billing.credit_notes import credit_notes

    with connect(load_settings()) as database:
        notes = credit_notes(database, tenant=tenant, period=check_period(period) if period else None)
    if as_json:
        _print_json([_summary(n) for n in notes])
        return
    if not notes:
        out.print("no credit notes" + (f" for {tenant}" if tenant else "") + (f" in {period}" if period else ""),
                  highlight=False)
    for n in notes:
        out.print(f"  {terminal_text(n.number)}  {terminal_text(n.invoice)}  {n.period}  {terminal_text(n.tenant):<24} "
                  f"{n.reason:<12} {n.total:>12.2f} {n.currency}", highlight=False)


@app.command("show")
def credit_note_show(
    number: str = typer.Argument(..., help="The credit note's number (CN-YYYY-NNNNNN)."),
    fmt: str = typer.Option("json", "--format", help="json, csv or pdf (pdf needs --out)."),
    out_file: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    lang: str = typer.Option("en", "--lang", help="Language of the PDF: en or zh-CN."),
) -> None:
    """Print one credit note."""
    from billing.errors import NotFound
    from reports.credit_note_document import credit_note_document
    from reports.render import render_credit_note

    check_format(fmt, "json", "csv", "pdf")
    check_choice("--lang", lang, LANGS)
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database:
        try:
            document = credit_note_document(database, rules, number)
        except NotFound:
            raise GpubillError(f"no credit note {number!r}; `gpubill credit-note list` shows them") from None
        data = render_credit_note(document, fmt, lang=lang)
    emit(data, out_file, binary=fmt == "pdf")


def _summary(note) -> dict:
    return {"number": note.number, "invoice": note.invoice, "tenant": note.tenant, "period": note.period,
            "reason": note.reason, "note": note.note, "actor": note.actor, "issued_at": note.issued_at,
            "currency": note.currency, "subtotal": f"{note.subtotal:.2f}", "tax": f"{note.tax:.2f}",
            "total": f"{note.total:.2f}", "vat_rate": str(note.vat_rate),
            "lines": [{"line_no": ln.line_no, "invoice_line_no": ln.invoice_line_no, "kind": ln.kind,
                       "description": ln.description, "amount": f"{ln.amount:.2f}"} for ln in note.lines]}


def _print_json(rows: list[dict]) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(rows).decode() + "\n")
