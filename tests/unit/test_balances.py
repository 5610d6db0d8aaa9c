"""Prepaid balances and budgets (billing/balances.py, gpubill balance / budget) on the embedded ClickHouse.

The usage is tests/unit/test_current_usage.py's fixture (rules: tests/e2e/rules; VAT 6 %,
grace period 3 days, a ¥10 trial credit for registered active tenants), with acme and
beta registered here, plus BURN_S seconds of beta in the hour before NOW:

    beta  RTX 4090 monthly, ¥1 per second, 10 % off (contract)
          200 s on 2026-03-10 + 600 s in [NOW − 3600 s, NOW) = 800 s
          rent ¥800.00, discount −¥80.00 → ¥720.00; trial credit −¥10.00 → net ¥710.00
          VAT 6 % → ¥42.60; March total ¥752.60
          last hour: 600 s × ¥1 × 0.9 = ¥540.00, with VAT × 1.06 = ¥572.40 per hour
    acme  A800-80G hourly: rent ¥150.00 + electricity ¥7.70 = ¥157.70, covered by its
          ¥150 onboarding credit (March only) and the ¥10 trial → net ¥0, total ¥0.00

Every expected figure is worked out by hand in a comment, never by the code under test.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal as D
from fractions import Fraction

import pytest

from billing.balances import (
    MAX_AMOUNT, Balance, InvalidAmount, InvalidRef, PeriodEstimate, RefConflict, balance, find_budget, ledger,
    parse_amount, set_budget, top_up,
)
from billing.errors import NotFound
from billing.invoicing import run_period
from billing.tenants import add_tenant
from schemas.tables import RATED_SECONDS
from tests.chdb_template import migrated_dsn
from tests.unit.cli_run import run_cli
from tests.unit.test_current_usage import PERIOD, RULES, RULES_DIR, T0, _fixture_rows, _row
from tests.unit.test_tenants import assert_one_printable_line
from warehouse import writes
from warehouse.connection import open_database
from warehouse.writes import stamp_hours

NOW = datetime(2026, 3, 12, 6, 0, tzinfo=timezone.utc)  # 14:00 in Shanghai, March
NOW_S = int(NOW.timestamp())
BURN_S = 600
APRIL_2 = datetime(2026, 4, 2, tzinfo=timezone.utc)  # April in Shanghai; March closed, its run due after 3 days


def _burn_rows() -> list[list]:
    # beta, 600 s ending one second before NOW (inside [NOW − 3600, NOW))
    return [_row("rent", "GPU-b", at, "beta", model="RTX4090", plan="monthly", price="2678400", per_s=2_678_400,
                 pct="10") for at in range(NOW_S - BURN_S, NOW_S)]


@pytest.fixture()
def db(tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    with open_database(migrated_dsn(tmp_path / 'db')) as database:
        database.insert("rated_seconds", _fixture_rows() + _burn_rows(), RATED_SECONDS)
        hour = NOW_S - 3600  # NOW is on the hour: the burn seconds all lie in this UTC hour
        stamp_hours(database, {(PERIOD, T0), (PERIOD, T0 + 3600), (PERIOD, hour)})
        for tenant in ("acme", "beta"):
            add_tenant(database, tenant, tenant.title(), now=datetime(2026, 3, 1, tzinfo=timezone.utc))
        yield database


# -------------------------------------------------------------------------- amounts and refs (pure)


@pytest.mark.parametrize("text, expected", [
    ("500", D("500.00")), ("99.5", D("99.50")), ("0.01", D("0.01")), ("12.34", D("12.34")),
    ("100000000", D("100000000.00")),  # exactly the cap
    (D("42.10"), D("42.10")),
])
def test_an_amount_is_digits_with_at_most_two_decimals(text, expected):
    amount = parse_amount(text)
    assert amount == expected and amount.as_tuple().exponent == -2


@pytest.mark.parametrize("value, fragment", [
    ("1e9", "not an amount"), ("1E2", "not an amount"), ("NaN", "not an amount"), ("Infinity", "not an amount"),
    ("-5", "not an amount"), ("+5", "not an amount"), ("0.001", "not an amount"), ("1,000", "not an amount"),
    ("", "not an amount"), ("５", "not an amount"), ("5\n", "not an amount"), (" 5", "not an amount"), ("\x1b[31m5", "not an amount"),
    ("1000000000000", "not an amount"),  # 13 digits
    ("0", "must be above zero"), ("0.00", "must be above zero"),
    ("100000000.01", "above the cap of 100000000.00"), ("999999999999", "above the cap"),
    (D("NaN"), "not a number"), (D("Infinity"), "not a number"), (D("1E+9"), "above the cap"),
    (D("0.001"), "not an amount"), (D("-1"), "not an amount"), (5.0, "not float"),
])
def test_a_hostile_amount_is_refused_in_one_printable_line(value, fragment):
    with pytest.raises(InvalidAmount) as refused:
        parse_amount(value)
    assert fragment in str(refused.value)
    assert_one_printable_line(str(refused.value))


def test_the_cap_is_one_hundred_million_yuan():
    assert MAX_AMOUNT == D("100000000.00")


@pytest.mark.parametrize("ref", ["pay\x1b[31m", "pay\n", "", "a/b", "../x", "pay 1", "ｐａｙ", "-pay", "p" * 65,
                                 "pay\u202e1"])
def test_a_hostile_ref_is_refused_before_anything_is_read(db, ref):
    with pytest.raises(InvalidRef) as refused:
        top_up(db, "beta", "10", ref)
    assert_one_printable_line(str(refused.value))
    assert db.query("SELECT count() FROM balance_ledger")[0][0] == 0


def test_an_unregistered_tenant_gets_no_top_up_budget_or_balance(db):
    with pytest.raises(NotFound, match="gamma is not registered"):
        top_up(db, "gamma", "10", "pay-1")
    with pytest.raises(NotFound, match="gamma is not registered"):
        set_budget(db, "gamma", "10")
    with pytest.raises(NotFound, match="gamma is not registered"):
        balance(db, RULES, "gamma", now=NOW)
    assert db.query("SELECT count() FROM balance_ledger")[0][0] == db.query("SELECT count() FROM budgets")[0][0] == 0


# -------------------------------------------------------------------------- the ledger


def test_a_top_up_is_idempotent_by_ref_and_a_reused_ref_is_refused(db):
    entry, added = top_up(db, "beta", "1000", "pay-2026-0001", note="wire 88", now=NOW)
    assert added and (entry.tenant, entry.amount, entry.note) == ("beta", D("1000.00"), "wire 88")
    again, added_again = top_up(db, "beta", D("1000.00"), "pay-2026-0001", note="re-run", now=NOW)
    assert not added_again and again == entry  # the recorded entry, note and time included
    for tenant, amount in (("beta", "999.99"), ("acme", "1000")):
        with pytest.raises(RefConflict) as refused:
            top_up(db, tenant, amount, "pay-2026-0001")
        assert "already recorded as a top-up of 1000.00 for beta" in str(refused.value)
        assert_one_printable_line(str(refused.value))
    assert db.query("SELECT count() FROM balance_ledger")[0][0] == 1
    assert [e.ref for e in ledger(db, "beta")] == ["pay-2026-0001"] and ledger(db, "acme") == []


def test_the_finance_view_reads_the_ledger(db):
    top_up(db, "beta", "1000", "pay-1", note="wire", now=NOW)
    top_up(db, "acme", "50.5", "pay-2", now=NOW)
    rows = db.query("SELECT ref, tenant, amount, note FROM v_balance_ledger ORDER BY ref")
    assert [(r, t, D(a), n) for r, t, a, n in rows] == [("pay-1", "beta", D("1000.00"), "wire"),
                                                       ("pay-2", "acme", D("50.50"), "")]


def test_the_latest_budget_wins_and_none_removes_it(db):
    assert find_budget(db, "beta") is None
    set_budget(db, "beta", "1000", now=NOW)
    set_budget(db, "beta", "2000", now=NOW)  # same millisecond: still the later one
    assert find_budget(db, "beta").amount == D("2000.00")
    set_budget(db, "beta", None, note="no limit", now=NOW)
    assert find_budget(db, "beta").amount is None and find_budget(db, "beta").note == "no limit"
    with pytest.raises(InvalidAmount, match="budget '-1' is not an amount"):
        set_budget(db, "beta", "-1")


# -------------------------------------------------------------------------- the balance


def test_the_balance_subtracts_the_month_to_date_estimate_and_runs_at_the_last_hours_burn(db):
    top_up(db, "beta", "1000", "pay-1", now=NOW)
    set_budget(db, "beta", "1000", now=NOW)
    got = balance(db, RULES, "beta", now=NOW)
    # 1000.00 − 752.60 (March estimate, see the module docstring) = 247.40
    # runway: 247.40 / 572.40 = 0.4322… h → 0.43 (572.40 × 0.43 = 246.13 ≤ 247.40 < 572.40 × 0.44 = 251.86)
    assert Fraction("247.40") / Fraction("572.40") > Fraction("0.43")
    assert got == Balance(
        tenant="beta", at=NOW, period=PERIOD, top_ups=D("1000.00"), invoiced=D(0), invoices=0,
        estimates=(PeriodEstimate(PERIOD, D("752.60"), closed=False),), estimated=D("752.60"),
        balance=D("247.40"), month_to_date=D("752.60"), budget=D("1000.00"),
        budget_used=D("0.7526"),  # 752.60 / 1000
        burn_per_hour=D("572.40"), runway_hours=D("0.43"),
    )


def test_without_usage_in_the_last_hour_there_is_no_runway_and_without_a_top_up_the_balance_is_negative(db):
    got = balance(db, RULES, "acme", now=NOW)
    # acme's March is covered by its credits (total ¥0.00); its seconds were on 2026-03-10
    assert (got.top_ups, got.estimated, got.balance, got.burn_per_hour, got.runway_hours, got.budget,
            got.budget_used) == (D(0), D("0.00"), D("0.00"), D("0.00"), None, None, None)
    beta = balance(db, RULES, "beta", now=NOW)
    assert beta.balance == D("-752.60") and beta.runway_hours == D("0.00")  # nothing left: zero hours


def test_a_closed_period_is_estimated_until_its_invoice_replaces_the_estimate(db):
    top_up(db, "beta", "1000", "pay-1", now=NOW)
    closed = balance(db, RULES, "beta", now=APRIL_2)
    # March ended (Shanghai) but is not invoiced: estimated like the current month; April has no usage
    assert closed.estimates == (PeriodEstimate("2026-03", D("752.60"), closed=True),
                                PeriodEstimate("2026-04", D("0.00"), closed=False))
    assert (closed.invoiced, closed.balance, closed.month_to_date, closed.runway_hours) == (
        D(0), D("247.40"), D("0.00"), None)
    run_period(db, RULES, "2026-03", now=datetime(2026, 4, 4, tzinfo=timezone.utc))
    invoiced = balance(db, RULES, "beta", now=APRIL_2)
    # the invoice's total (752.60, the same figures) replaces the estimate: the balance is unchanged
    assert (invoiced.invoiced, invoiced.invoices, invoiced.estimates, invoiced.balance) == (
        D("752.60"), 1, (PeriodEstimate("2026-04", D("0.00"), closed=False),), D("247.40"))
    # and at NOW, in March, the current month is invoiced: no estimate left, month to date is the invoice
    march = balance(db, RULES, "beta", now=NOW)
    assert (march.estimates, march.month_to_date, march.balance) == ((), D("752.60"), D("247.40"))


# -------------------------------------------------------------------------- the command line


def _gpubill(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    return run_cli(monkeypatch, capsys, *args)


@pytest.fixture()
def cli_env(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", f"chdb://{tmp_path / 'cli'}")
    monkeypatch.setenv("GPUBILL_RULES", str(RULES_DIR))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    return tmp_path


@pytest.mark.parametrize("args, fragment", [
    (["balance", "topup", "--tenant", "beta", "--amount", "1e9", "--ref", "p1"], "amount '1e9' is not an amount"),
    (["balance", "topup", "--tenant", "beta", "--amount", "NaN", "--ref", "p1"], "amount 'NaN' is not an amount"),
    (["balance", "topup", "--tenant", "beta", "--amount", "0.001", "--ref", "p1"], "not an amount"),
    (["balance", "topup", "--tenant", "beta", "--amount", "5", "--ref", "p\x1b[31m1"], "x1b[31m1' is not an id"),  # ESC shown escaped
    (["balance", "topup", "--tenant", "be\nta", "--amount", "5", "--ref", "p1"], "is not an id"),
    (["balance", "topup", "--tenant", "beta", "--amount", "5", "--ref", "p1", "--note", "a\u202eb"],
     "RIGHT-TO-LEFT OVERRIDE"),
    (["balance", "show", "--tenant", "[red]x"], "tenant id '[red]x'"),
    (["budget", "set", "--tenant", "beta"], "exactly one of --amount A and --none"),
    (["budget", "set", "--tenant", "beta", "--amount", "5", "--none"], "exactly one of"),
    (["budget", "set", "--tenant", "beta", "--amount", "-5"], "budget '-5' is not an amount"),
])
def test_the_command_line_refuses_hostile_input_in_one_line_before_opening_anything(
        args, fragment, cli_env, monkeypatch, capsys):
    code, _, error = _gpubill(monkeypatch, capsys, *args)
    lines = [line for line in error.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], error
    assert_one_printable_line(lines[0])
    assert not (cli_env / "cli").exists()  # refused before the database was opened


def test_the_commands_top_up_show_and_budget(cli_env, monkeypatch, capsys):
    assert _gpubill(monkeypatch, capsys, "tenant", "add", "beta", "--name", "Beta [bold]Corp")[0] == 0
    code, out, _ = _gpubill(monkeypatch, capsys, "balance", "topup", "--tenant", "beta", "--amount", "120.5",
                            "--ref", "pay-1", "--note", "wire")
    assert code == 0 and "recorded pay-1: +120.50 CNY for beta" in out
    code, out, _ = _gpubill(monkeypatch, capsys, "balance", "topup", "--tenant", "beta", "--amount", "120.50",
                            "--ref", "pay-1")
    assert code == 0 and "already recorded" in out and "nothing changed" in out
    code, _, error = _gpubill(monkeypatch, capsys, "balance", "topup", "--tenant", "beta", "--amount", "5",
                              "--ref", "pay-1")
    assert code == 1 and "already recorded as a top-up of 120.50 for beta" in error
    code, _, error = _gpubill(monkeypatch, capsys, "balance", "topup", "--tenant", "gamma", "--amount", "5",
                              "--ref", "pay-2")
    assert code == 1 and "gamma is not registered" in error
    code, out, _ = _gpubill(monkeypatch, capsys, "budget", "set", "--tenant", "beta", "--amount", "100")
    assert code == 0 and "beta has a budget of 100.00 CNY per period" in out
    code, out, _ = _gpubill(monkeypatch, capsys, "balance", "show", "--tenant", "beta", "--json")
    assert code == 0
    (shown,) = json.loads(out)
    # no usage now (the clock's month): top-ups 120.50, nothing invoiced or estimated
    assert {k: shown[k] for k in ("tenant", "top_ups", "invoiced", "estimated", "balance", "budget", "budget_used",
                                  "burn_per_hour", "runway_hours", "currency")} == {
        "tenant": "beta", "top_ups": "120.50", "invoiced": "0.00", "estimated": "0.00", "balance": "120.50",
        "budget": "100.00", "budget_used": "0.0000", "burn_per_hour": "0.00", "runway_hours": None, "currency": "CNY"}
    code, out, error = _gpubill(monkeypatch, capsys, "balance", "show")
    assert code == 0 and "beta" in out and "120.50" in out and "1 tenants" in error
    code, out, _ = _gpubill(monkeypatch, capsys, "budget", "set", "--tenant", "beta", "--none")
    assert code == 0 and "beta has no budget" in out
    code, out, _ = _gpubill(monkeypatch, capsys, "spend", "--tenant", "beta")
    # nothing used this month: the month to date is zero and the balance the top-up
    assert code == 0 and "beta, " in out and "an estimate" in out and "balance 120.50 CNY (no budget)" in out
    code, out, _ = _gpubill(monkeypatch, capsys, "spend", "--tenant", "beta", "--json")
    spent = json.loads(out)
    assert (spent["balance"], spent["estimated"], spent["vat"], spent["month_invoiced"]) == ("120.50", "0.00", "0.00", False)
    code, _, error = _gpubill(monkeypatch, capsys, "spend", "--tenant", "be\x1bta")
    assert code == 1 and "\x1b" not in error and "is not an id" in error


# -------------------------------------------------------------------------- the stream's side (issue 15)


def test_the_live_context_prices_the_streams_quantities_to_the_warehouses_balance(db):
    """SpendContexts.read gives the tracker what the stream cannot know; priced with the
    stream's quantities of beta's March (800 s of RTX 4090 monthly at ¥1/s, 10 % off) it is
    the warehouse's balance to the fen: 1000.00 − 752.60 = 247.40, burn ¥572.40/h, runway 0.43 h."""
    from billing_rules.spend import PeriodSpend, RentTerms, position
    from billing.live_spend import SpendContexts

    top_up(db, "beta", "1000", "pay-1", now=NOW)
    set_budget(db, "beta", "1000", now=NOW)
    contexts = SpendContexts().read(db, RULES, now=NOW)
    assert set(contexts) == {"acme", "beta"}
    beta = contexts["beta"]
    assert (beta.period, beta.vat_rate, beta.base, beta.budget) == (PERIOD, D("0.06"), D("1000.00"), D("1000.00"))
    assert beta.burn_per_hour == Fraction("572.40")  # 600 s × ¥1 × 0.9 × 1.06
    assert [c.remaining for c in beta.credits] == [D("10.00")]  # the trial credit
    assert contexts["acme"].base is None  # never topped up: not prepaid
    stream = PeriodSpend({RentTerms("RTX4090", "monthly", D("2678400"), 2_678_400, D("10")): 800}, {})
    where = position("beta", PERIOD, stream, beta)
    assert (where.month_to_date, where.balance, where.runway_hours) == (D("752.60"), D("247.40"), D("0.43"))
    assert where.month_to_date == balance(db, RULES, "beta", now=NOW).month_to_date
