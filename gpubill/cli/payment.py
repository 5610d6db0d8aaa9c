"""`gpubill payment record | import | list | show | reverse | apply`: payments received (issue 38;
billing/payments.py and billing/payment_import.py do the work).

A payment is allocated to the invoices named, else to the tenant's outstanding invoices oldest
due date first; the rest is the tenant's unapplied credit, which its next invoices (or `payment
apply`) spend. Each is recorded once by its ref (an import's by the bank's transaction id): the
same command again changes nothing; the same ref with other content is refused. A payment is
never edited: a bounced one is reversed by a fact of its own.
"""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.books import open_books
from gpubill.cli.common import connect, count, err, out, read_rules, terminal_text
from gpubill.cli.report import check_choice
from gpubill.config import load_settings
from gpubill.errors import GpubillError

app = typer.Typer(help="Payments received: recorded, imported from a bank statement, allocated to invoices, "
                  "reversed.", no_args_is_help=True)


def _waiting(message: str) -> None:
    err.print(terminal_text(message), highlight=False)


@app.command("record")
def payment_record(
    tenant: str = typer.Option(..., "--tenant", help="The registered tenant that paid."),
    amount: str = typer.Option(..., "--amount", help="CNY received, above zero, at most two decimals (e.g. 1200.50)."),
    ref: str = typer.Option(..., "--ref", help="The payment's own reference (letters, digits, . _ -): recorded once."),
    received: str = typer.Option(..., "--received", help="The date the money came, YYYY-MM-DD (billing time zone)."),
    method: str = typer.Option("bank", "--method", help="bank, alipay, wechat, card or other."),
    invoice: list[str] = typer.Option([], "--invoice", help="N or N=AMOUNT: pay invoice N (what it still asks, or "
                                      "AMOUNT of it); repeat for several. Without it: oldest due date first."),
    note: str = typer.Option("", "--note", help="Free text kept with the payment (at most 500 characters)."),
) -> None:
    """Record a payment received; prints where it went. The same --ref again changes nothing."""
    from billing.accounts import invoice_payments
    from billing.balances import check_ref, parse_amount
    from billing.payments import METHODS, check_received, check_text, parse_invoice_arg, record_payment
    from billing.tenants import check_tenant_id

    # every option checked before anything is opened
    tenant, money_in, ref = check_tenant_id(tenant), parse_amount(amount, "--amount"), check_ref(ref)
    check_choice("--method", method, METHODS)
    named = [parse_invoice_arg(spec) for spec in invoice]
    note = check_text(note, "--note")
    settings = load_settings()
    rules = read_rules(settings)
    received_on = check_received(received, rules)
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        payment, created = record_payment(database, rules, tenant, money_in, ref, received_on, method=method,
                                          invoices=named, note=note, on_wait=_waiting)
        states = invoice_payments(database, rules, payment.tenant)
    said = (f"{terminal_text(payment.ref)}: {payment.amount:.2f} CNY from {terminal_text(payment.tenant)}, received "
            f"{payment.received_on} ({payment.method})")
    if not created:
        out.print(f"{said} is already recorded; nothing changed", highlight=False)
        return
    out.print(f"recorded {said}", highlight=False)
    _print_allocations(payment, states)


def _print_allocations(payment, states) -> None:
    """Each invoice the payment went to, what that invoice still asks, and what is held as credit."""
    width = max([14, *(len(number) for number, _ in payment.allocations)])
    for number, amount in payment.allocations:
        state = states.get(number)
        after = "" if state is None else f"  ({state.payment_state}, outstanding {state.outstanding:.2f}" + (
            f", written off {state.written_off:.2f}" if state.written_off else "") + ")"
        out.print(f"  {terminal_text(number):<{width}}  {amount:>14.2f}{after}", highlight=False)
    if payment.unapplied:
        out.print(f"  {'held as credit':<{width}}  {payment.unapplied:>14.2f}", highlight=False)
    if not payment.allocations and not payment.unapplied:
        out.print("  nothing allocated", highlight=False)


@app.command("list")
def payment_list(
    tenant: Optional[str] = typer.Option(None, "--tenant", help="Only this tenant's payments."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array of payments with their allocations."),
) -> None:
    """Payments by date received: amount, what is allocated, what is held as credit, reversals."""
    from billing.payments import payments
    from billing.tenants import check_tenant_id

    one = check_tenant_id(tenant) if tenant is not None else None
    with connect(load_settings()) as database:
        found = payments(database, tenant=one)
    if as_json:
        _print_json([p.as_dict() for p in found])
        return
    if not found:
        out.print("no payments" + (f" of {terminal_text(one)}" if one else ""), highlight=False)
        return
    from rich.table import Table

    table = Table("ref", "tenant", "received", "method")
    for name in ("amount", "allocated", "unapplied"):
        table.add_column(name, justify="right")
    table.add_column("reversed")
    for p in found:
        allocated = sum((a for _, a in p.allocations), Decimal("0.00"))
        table.add_row(terminal_text(p.ref), terminal_text(p.tenant), str(p.received_on), p.method, f"{p.amount:.2f}",
                      f"{allocated:.2f}", f"{p.unapplied:.2f}", str(p.reversed_on) if p.reversed_on else "")
    out.print(table)
    total = sum((p.amount for p in found if p.reversed_on is None), Decimal("0.00"))
    err.print(f"{count(len(found), 'payment')}; {total:.2f} CNY received, not counting reversed ones", highlight=False)


@app.command("show")
def payment_show(
    ref: str = typer.Argument(..., help="The payment's ref."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object."),
) -> None:
    """One payment: where it came from, where it went, whether it was reversed."""
    from billing.balances import check_ref
    from billing.payments import payments

    ref = check_ref(ref)
    with connect(load_settings()) as database:
        found = payments(database, ref=ref)
    if not found:
        raise GpubillError(f"no payment {ref}; `gpubill payment list` shows them")
    p = found[0]
    if as_json:
        _print_json(p.as_dict())
        return
    rows = [("payment", p.ref), ("tenant", p.tenant), ("amount", f"{p.amount:.2f} CNY"),
            ("received", str(p.received_on)), ("method", p.method), ("source", p.source)]
    rows += [(name, value) for name, value in (("bank txn", p.bank_txn), ("payer", p.payer),
                                               ("remittance", p.remittance), ("note", p.note)) if value]
    rows += [(f"to {number}", f"{amount:.2f}") for number, amount in p.allocations]
    rows.append(("held as credit", f"{p.unapplied:.2f}"))
    if p.reversed_on is not None:
        rows.append(("reversed", f"{p.reversed_on}: {p.reversal_reason}"))
    rows.append(("recorded", p.recorded_at.isoformat(timespec="seconds").replace("+00:00", "Z")))
    for name, value in rows:
        out.print(f"{name:<18} {terminal_text(value)}", highlight=False)


@app.command("reverse")
def payment_reverse(
    ref: str = typer.Argument(..., help="The payment's ref."),
    reason: str = typer.Option(..., "--reason", help="Why: bounced, recorded by mistake (kept with the reversal)."),
) -> None:
    """Reverse a payment (bounced, mistaken): what it paid is outstanding again. A fact; the payment is not edited."""
    from billing.balances import check_ref
    from billing.payments import PaymentRefused, check_text, payments, reverse_payment

    ref, reason = check_ref(ref), check_text(reason, "--reason")
    if not reason:
        raise PaymentRefused("--reason is required: say why the payment is reversed (bounced, recorded by mistake)")
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        before = payments(database, ref=ref)  # what it had allocated, to say what is outstanding again
        reversed_ = reverse_payment(database, rules, ref, reason, on_wait=_waiting)
    out.print(f"reversed {terminal_text(reversed_.ref)} on {reversed_.reversed_on}: {reversed_.amount:.2f} CNY from "
              f"{terminal_text(reversed_.tenant)}", highlight=False)
    for number, amount in (before[0].allocations if before else ()):
        out.print(f"  {terminal_text(number)}  {amount:.2f} outstanding again", highlight=False)
    if before and before[0].unapplied:
        out.print(f"  {before[0].unapplied:.2f} of credit no longer held", highlight=False)


@app.command("apply")
def payment_apply(
    tenant: str = typer.Option(..., "--tenant", help="The registered tenant whose credit to spend."),
    invoice: list[str] = typer.Option([], "--invoice", help="Pay these invoices, in this order (repeat); without "
                                      "it: every outstanding invoice, oldest due date first."),
) -> None:
    """Spend a tenant's unapplied credit (overpayments, credit notes) on its outstanding invoices."""
    from billing.accounts import FAR, ledger
    from billing.payments import PaymentRefused, apply_credit, parse_invoice_arg
    from billing.tenants import check_tenant_id

    tenant = check_tenant_id(tenant)
    numbers = []
    for spec in invoice:
        number, amount = parse_invoice_arg(spec)
        if amount is not None:
            raise PaymentRefused(f"--invoice {terminal_text(spec)}: credit pays what the invoice still asks; name it "
                                 "without =AMOUNT")
        if number in numbers:
            raise PaymentRefused(f"--invoice {number} is named twice")
        numbers.append(number)
    settings = load_settings()
    rules = read_rules(settings)
    with connect(settings) as database, open_books(database, settings, numbered=True, rules=rules):
        applied = apply_credit(database, rules, tenant, invoices=numbers, on_wait=_waiting)
        held = ledger(database, rules, tenant).unapplied(FAR).get(tenant, Decimal("0.00"))
    if not applied:
        out.print(f"nothing applied: {terminal_text(tenant)} holds {held:.2f} CNY of credit and "
                  + ("the invoices named ask nothing" if numbers else "has nothing outstanding" if held else
                     "there is none to spend"), highlight=False)
        return
    total = sum((amount for _, amount in applied), Decimal("0.00"))
    out.print(f"applied {total:.2f} CNY of {terminal_text(tenant)}'s credit; {held:.2f} CNY still held", highlight=False)
    by_invoice: dict[str, Decimal] = {}
    for number, amount in applied:
        by_invoice[number] = by_invoice.get(number, Decimal("0.00")) + amount
    for number, amount in by_invoice.items():
        out.print(f"  {terminal_text(number)}  {amount:.2f}", highlight=False)


@app.command("import")
def payment_import(
    file: Path = typer.Argument(..., help="The bank statement: CSV (UTF-8 or GB18030) with columns 流水号, 交易日期, "
                                "金额, 对方户名, 附言 (or their English names; docs/bank_statements.md)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show how each line matches and what would be recorded; "
                                 "write nothing."),
) -> None:
    """Record a bank statement's receipts as payments: each matched by an invoice number in its remittance, else
    by a tenant id in it; unmatched lines are listed for review, never guessed. Idempotent by transaction id.
    One bad line (listed, each) and nothing is written."""
    from billing.payment_import import plan_import, record_import

    data = _read_statement(file)  # before anything is opened
    settings = load_settings()
    rules = read_rules(settings)
    recorded: list = []
    with connect(settings) as database:
        plan = plan_import(database, rules, data)  # bad lines refused before the books are opened
        if plan.bad or dry_run:
            if dry_run:
                _print_plan(plan, {}, dry_run=True)
            if plan.bad:
                _refuse_bad(file, plan.bad)
            return
        with open_books(database, settings, numbered=True, rules=rules):
            plan = plan_import(database, rules, data)  # again: the books, open, are at the log's end
            if plan.bad:
                _refuse_bad(file, plan.bad)
            recorded = record_import(database, rules, plan, on_wait=_waiting)
    _print_plan(plan, {p.ref: (p, made) for p, made in recorded}, dry_run=False)


def _read_statement(file: Path) -> bytes:
    from schemas.bank_statement import MAX_BYTES

    try:
        with open(file, "rb") as handle:
            return handle.read(MAX_BYTES + 1)  # one byte more: the reader refuses a file above its limit
    except IsADirectoryError:
        raise GpubillError(f"{terminal_text(file)} is a directory: give the statement's CSV file") from None
    except OSError as exc:
        raise GpubillError(f"cannot read {terminal_text(file)}: {exc.strerror or exc}") from None


def _refuse_bad(file: Path, bad) -> None:
    for line in bad:
        err.print(f"{terminal_text(file)} line {line.line_no}: {terminal_text(line.reason)}", highlight=False,
                  soft_wrap=True)
    raise GpubillError(f"{count(len(bad), 'bad line')} in {terminal_text(file)}: nothing was written; fix them and "
                       "import the file again")


def _print_plan(plan, recorded: dict, *, dry_run: bool) -> None:
    """One line per receipt — what it is, what became of it — then a sentence of counts."""
    for p in plan.lines:
        line = p.line
        head = f"line {line.line_no:<5} {terminal_text(p.ref):<24} {line.received_on}  {line.amount:>14.2f}  "
        if p.fate == "unmatched":
            out.print(f"{head}unmatched: {terminal_text(p.match.why)} (payer {terminal_text(line.payer or '—')}, "
                      f"remittance {terminal_text(repr(line.remittance))})", highlight=False, soft_wrap=True)
        elif p.fate == "imported":
            out.print(f"{head}{terminal_text(p.recorded.tenant)}: already imported; skipped", highlight=False,
                      soft_wrap=True)
        else:
            done = recorded.get(p.ref)
            if done is None:
                went = "would be recorded" if dry_run else "not recorded"
            elif not done[1]:
                went = "already imported; skipped"
            else:
                went = "recorded: " + _where(done[0])
            out.print(f"{head}{terminal_text(p.match.tenant)} ({terminal_text(p.match.why)}): {went}", highlight=False,
                      soft_wrap=True)
    new = [p for p in plan.having("new") if dry_run or (p.ref in recorded and recorded[p.ref][1])]
    skipped = len(plan.having("imported")) + sum(1 for p in plan.having("new") if p.ref in recorded and not recorded[p.ref][1])
    unmatched = plan.having("unmatched")
    total = sum((p.line.amount for p in new), Decimal("0.00"))
    verb = "would be recorded" if dry_run else "recorded"
    said = (f"{count(len(plan.lines), 'receipt')}: {len(new):,} {verb} ({total:.2f} CNY), {skipped:,} already "
            f"imported, {len(unmatched):,} unmatched")
    if unmatched:
        said += (f" ({sum((p.line.amount for p in unmatched), Decimal('0.00')):.2f} CNY) for review: record each with "
                 "`gpubill payment record --ref bank-<transaction id>`")
    out.print(said + ("; nothing was written (--dry-run)" if dry_run else ""), highlight=False, soft_wrap=True)


def _where(payment) -> str:
    parts = [f"{number} {amount:.2f}" for number, amount in payment.allocations]
    if payment.unapplied:
        parts.append(f"held as credit {payment.unapplied:.2f}")
    return terminal_text(", ".join(parts) or "nothing allocated")


def _print_json(value) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(value).decode() + "\n")
