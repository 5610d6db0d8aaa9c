"""`gpubill bench receivables`: the aging of 1,000 tenants' year of documents (issue 38: ≤ 2 s).

In a private chDB in a temporary directory (or `--keep DIR`):

1. **The year.** The facts of gpubill/bench/receivables_year.py — `bench books`' year of invoices
   (with their lines), credit notes, voids and top-ups, plus payments (some partial, some late,
   some bounced), credit spent at issue, refunds and write-offs — projected straight into the
   database (billing/books.py `UnloggedBooks`: no broker; this benchmark measures the read path).
2. **The read, timed.** `billing.accounts.receivables(db, rules, as_of)` — what `gpubill
   receivables --as-of` calls — `runs` times in this process; the median and the slowest.
3. **The command, timed.** `gpubill receivables --as-of … --format json` (three times), as an operator
   runs it (a process of its own: start-up, the database opened, the aging printed); the median.
4. **Checked.** The aging equals billing_rules/accounts.py's (`invoice_states`, `unapplied`,
   `aging`) on every document read row by row (`identical`), and the command printed the same total.

Figures:

    tenants, months, invoices, payments, partial_payments, allocations, credit_notes, refunds,
    reversals, write_offs        what the year holds
    as_of                        the date of the aging (default: 2026-01-10, ten days after December's
                                 invoices were issued: they are not yet due)
    owing                        tenants with something outstanding; outstanding, unapplied the total's
    build_s                      step 1
    receivables_s                step 2, the median; receivables_max_s the slowest
    command_s                    step 3, the median wall time of the process (start-up and opening the
                                 database included: about 1 s of it on the development machine)
    identical                    step 4
    target_s, target_met         receivables_s ≤ 2 (the issue's target)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import orjson

from billing_rules import DEFAULT_RULES_DIR
from gpubill.errors import GpubillError

__all__ = ["bench_receivables"]

Say = Callable[[str], None]
TARGET_S = 2.0  # issue 38: `gpubill receivables --as-of …` over 1,000 tenants with a year of documents ≤ 2 s
YEAR = 2025  # a year wholly past, so that every payment of it is received before today


def bench_receivables(tenants: int = 1000, months: int = 12, *, runs: int = 5, command_runs: int = 3,
                      as_of: date | None = None, keep: Path | None = None, say: Say = lambda _: None) -> dict:
    """Build the year, time the aging as of `as_of` (`runs` reads, `command_runs` commands), check it; returns
    the figures `gpubill bench receivables --json` prints."""
    if not 1 <= months <= 12:
        raise GpubillError("--months: 1 to 12 (one year)")
    as_of = as_of or date(YEAR + 1, 1, 10)
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        return _bench(keep, tenants, months, runs, command_runs, as_of, say)
    with tempfile.TemporaryDirectory(prefix="gpubill-bench-receivables-") as tmp:
        return _bench(Path(tmp), tenants, months, runs, command_runs, as_of, say)


def _bench(work: Path, tenants: int, months: int, runs: int, command_runs: int, as_of: date, say: Say) -> dict:
    from billing.accounts import ledger, receivables
    from billing_rules import load_rules
    from billing_rules.accounts import aging, total_of
    from warehouse.connection import open_database

    rules = load_rules(DEFAULT_RULES_DIR)
    dsn = f"chdb://{work / 'clickhouse'}"
    with open_database(dsn) as db:
        built, build_s = _built(db, rules, tenants, months, say)
        say(f"timing the aging as of {as_of}: billing.accounts.receivables, {runs} runs")
        times, answer = [], None
        for _ in range(runs):
            t0 = time.perf_counter()
            answer = receivables(db, rules, as_of)
            times.append(time.perf_counter() - t0)
        rows, total = answer
        books = ledger(db, rules)
        pure = aging(books.states(as_of).values(), books.unapplied(as_of))
        identical = rows == pure and total == total_of(pure)
    say(f"gpubill receivables --as-of {as_of} --format json, in a process of its own, {command_runs} times")
    runs_of_command = [_command(dsn, as_of) for _ in range(max(1, command_runs))]
    command_s = statistics.median(took for took, _ in runs_of_command)
    printed = runs_of_command[0][1]
    return {
        **built, "as_of": str(as_of), "owing": sum(1 for r in rows if r.outstanding > 0),
        "outstanding": f"{total.outstanding:.2f}", "unapplied": f"{total.unapplied:.2f}",
        "build_s": round(build_s, 1), "receivables_s": round(statistics.median(times), 3),
        "receivables_max_s": round(max(times), 3), "command_s": round(command_s, 2),
        "identical": identical and printed == {k: v for k, v in total.as_dict().items() if k != "tenant"},
        "target_s": TARGET_S,
        "target_met": statistics.median(times) <= TARGET_S,
    }


def _built(db: Any, rules: Any, tenants: int, months: int, say: Say) -> tuple[dict, float]:
    """Step 1 (module docstring): the year projected into `db`, unless a kept database holds it already."""
    from billing.books import UnloggedBooks
    from billing.invoice_store import seller_party
    from gpubill.bench.receivables_year import YearOfAccounts, year_of_accounts

    kept = db.query("SELECT count() FROM invoices")[0][0]
    if kept:
        say(f"the database holds {kept:,} invoice rows already: timing it as it is")
        return _counted(db, tenants, months), 0.0
    say(f"projecting {months} months of documents and payments of {tenants:,} tenants")
    counts, books = YearOfAccounts(), UnloggedBooks()
    t0 = time.perf_counter()
    for batch in year_of_accounts(tenants, months, YEAR, rules, seller_party(rules.seller), counts):
        books.record(db, batch)
    build_s = time.perf_counter() - t0
    say(f"{counts.books.facts:,} documents' facts and {counts.payments:,} payments projected in {build_s:.1f} s "
        f"(the last dated {counts.last_on})")
    return {"tenants": tenants, "months": months, "invoices": counts.books.invoices, "payments": counts.payments,
            "partial_payments": counts.partial_payments, "allocations": counts.allocations,
            "credit_notes": counts.books.credit_notes, "refunds": counts.refunds, "reversals": counts.reversals,
            "write_offs": counts.write_offs}, build_s


def _counted(db: Any, tenants: int, months: int) -> dict:
    """The figures of a kept database, counted in it."""
    one = lambda sql: int(db.query(sql)[0][0])  # noqa: E731
    return {"tenants": tenants, "months": months,
            "invoices": one("SELECT count() FROM invoices FINAL WHERE status IN ('issued', 'voided')"),
            "payments": one("SELECT count() FROM payments FINAL"), "partial_payments": None,
            "allocations": one("SELECT count() FROM allocations FINAL"),
            "credit_notes": one("SELECT count() FROM credit_notes FINAL"),
            "refunds": one("SELECT count() FROM refunds FINAL"),
            "reversals": one("SELECT count() FROM payment_reversals FINAL"),
            "write_offs": one("SELECT count() FROM write_offs FINAL WHERE amount > 0")}


def _command(dsn: str, as_of: date) -> tuple[float, dict]:
    """Step 3: `gpubill receivables --as-of AS_OF --format json` on `dsn`; (its wall time, the total it printed)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_")},
           "GPUBILL_CLICKHOUSE": dsn, "GPUBILL_RULES": str(DEFAULT_RULES_DIR), "NO_COLOR": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "receivables", "--as-of", str(as_of),
                           "--format", "json"], env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode:
        raise GpubillError(f"gpubill receivables failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    return took, orjson.loads(done.stdout)["total"]
