"""`gpubill verify-log --period P [--json]`: the log proves the projections (issue 25, item 5).

The period's readings and corrections are replayed from Kafka into a scratch database and
priced under the current rules (streams/log_replay.py); each tenant's charges for the period
are then set beside what the live database bills for it (billing/verify_log.py says on which
basis, and why). Exit 0 and say so when they agree to the fen; exit 1 listing every difference.

chDB runs one engine per process and the live database may be chDB, opened by this process:
the replay runs in a child process (this command with the hidden --scratch-child DIR), on a
database in DIR, and writes its figures to DIR/replayed.json; this process reads the live side
and compares. The child also projects the books (gpu.books.v1, issue 37) from their first
message into its scratch database: every invoice and credit note of the period as the log
records it must be the live database's, and bill what the live one bills. The end offsets are taken here, before the child starts: the replay reads up to
them, so readings produced while it runs are not part of the proof.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Optional

import typer

from gpubill.cli.common import check_period, connect, err, out, read_rules, take_corrections_to_end, terminal_text
from gpubill.config import load_settings
from gpubill.errors import GpubillError

_ENDS, _RESULT = "ends.json", "replayed.json"


def verify_log(
    period: str = typer.Option(..., help="Billing period YYYY-MM (one that has ended)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object: period, rules_revision, clean, tenants."),
    scratch_child: Optional[Path] = typer.Option(None, "--scratch-child", hidden=True,
                                                 help="(internal) replay into a scratch database in this directory."),
) -> None:
    """Replay the period's readings and corrections from Kafka into a scratch database and compare
    each tenant's charges with what the live database bills; exit 1 on any difference."""
    import orjson

    from gpubill.cli.invoice import check_ended

    settings = load_settings()
    rules = read_rules(settings)
    check_period(period)
    if scratch_child is not None:
        _replay_child(settings, rules, period, scratch_child)
        return
    check_ended(rules, period)
    from billing.verify_log import billed_charges, compare, documents, documents_differ
    from streams.log_replay import readings_ends

    ends = readings_ends(settings)  # Kafka unreachable: refused here, in one line, before anything runs
    with connect(settings) as database:  # the live side first: a database held elsewhere refuses at once
        # the live database holds every correction on the log before it is compared with it (issue 36)
        take_corrections_to_end(database, settings, f"verify-log {period}")
        billed = billed_charges(database, period)
        live_documents = documents(database, period)
    with tempfile.TemporaryDirectory(prefix="gpubill-verify-log-") as scratch:
        directory = Path(scratch)
        (directory / _ENDS).write_bytes(orjson.dumps([[t, p, end] for (t, p), end in sorted(ends.items())]))
        child = subprocess.run([sys.executable, "-m", "gpubill.cli", "verify-log", "--period", period,
                                "--scratch-child", str(directory)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL)
        if child.returncode != 0:  # the child said why, in one line on stderr
            raise typer.Exit(1)
        replayed = orjson.loads((directory / _RESULT).read_bytes())
    if replayed["rules_revision"] != rules.revision:
        raise GpubillError(f"the rule files changed during the replay ({rules.revision} → {replayed['rules_revision']}); "
                           "run verify-log again")
    checks = compare({t: Decimal(a) for t, a in replayed["charges"].items()}, billed)
    differences = [c for c in checks if c.difference]
    # the books (issue 37): each document as the log records it is the live database's, and bills the same
    books_billed = {t: Decimal(a) for t, a in replayed["books_charges"].items()}
    unlike = documents_differ(replayed["documents"], live_documents)
    unlike += [f"tenant {c.tenant}: the books bill {books_billed.get(c.tenant, Decimal(0)):.2f}, the database "
               f"{c.billed.total:.2f}" for c in checks if books_billed.get(c.tenant, Decimal(0)) != c.billed.total]
    if as_json:
        sys.stdout.write(orjson.dumps({
            "period": period, "rules_revision": rules.revision, "clean": not differences,
            "basis": "charges before credits and VAT: rent + electricity + discounts (CNY)",
            "messages": replayed["messages"], "corrections": replayed["corrections"],
            "books": {"facts": replayed["facts"], "documents": len(replayed["documents"]), "differences": unlike},
            "corrections_applied": replayed["corrections_applied"],
            "tenants": [{"tenant": c.tenant, "log": f"{c.log:.2f}", "billed": f"{c.billed.total:.2f}",
                         "difference": f"{c.difference:.2f}", "invoice": f"{c.billed.invoice:.2f}",
                         "adjustments": f"{c.billed.adjustments:.2f}", "credited": f"{c.billed.credited:.2f}"}
                        for c in checks],
        }).decode() + "\n")
    else:
        _print(period, rules.revision, replayed, checks)
    if unlike:
        if not as_json:
            for line in unlike:
                out.print(f"BOOKS {terminal_text(line)}", highlight=False)
        raise GpubillError(f"verify-log {period}: {len(unlike)} document(s) or tenant(s) stated otherwise on the books "
                           "(gpu.books.v1) than in the database")
    if differences:
        if not as_json:
            for c in differences:
                out.print(f"DIFFERENCE {terminal_text(c.tenant)}: billed {c.billed.total:.2f}, the log "
                          f"{c.log:.2f} ({c.difference:+.2f} CNY before credits and VAT)", highlight=False)
        raise GpubillError(f"verify-log {period}: {len(differences)} tenant(s) billed otherwise than the log proves")
    if not as_json:
        out.print(f"verify-log {period}: clean — every tenant is billed what the log proves, to the fen, and every "
                  f"document is the books' ({len(live_documents)} of {period}, {replayed['facts']:,} facts on the books)",
                  highlight=False)


def _print(period: str, revision: str, replayed: dict, checks: list) -> None:
    from rich.table import Table

    table = Table("tenant", "log", "billed", "difference", "invoice", "adjustments", "credited",
                  title=f"{period} from the log under rules {revision}: charges before credits and VAT (CNY)")
    for c in checks:
        table.add_row(terminal_text(c.tenant), f"{c.log:.2f}", f"{c.billed.total:.2f}", f"{c.difference:+.2f}",
                      f"{c.billed.invoice:.2f}", f"{c.billed.adjustments:.2f}", f"{c.billed.credited:.2f}")
    out.print(table)
    out.print(f"{replayed['messages']:,} readings messages replayed; {replayed['corrections']:,} corrections on the "
              f"log, {replayed['corrections_applied']:,} of them touching {period}", highlight=False)


def _project_books(scratch, settings, period: str) -> tuple[int, dict[str, str], list[list[str]]]:
    """The books projected from their first message into the scratch database: (facts, each tenant's
    charges for `period` as the books bill them, the period's documents as the books state them)."""
    from billing.verify_log import billed_charges, documents
    from streams.kafka.books import KafkaBooks

    books = KafkaBooks(settings).open_reader()
    try:
        facts = books.catch_up(scratch)
    finally:
        books.close()
    charges = {t: f"{b.total:.2f}" for t, b in billed_charges(scratch, period).items()}
    return facts, charges, documents(scratch, period)


def _replay_child(settings, rules, period: str, directory: Path) -> None:
    """The child's work: replay into DIR/clickhouse, write DIR/replayed.json. Never the live database."""
    import orjson

    from streams.log_replay import replay_log
    from warehouse.connection import open_database

    ends = {(t, int(p)): int(end) for t, p, end in orjson.loads((directory / _ENDS).read_bytes())}
    shown = {"at": 0.0}

    def progress(done: int, goal: int) -> None:
        if time.monotonic() - shown["at"] >= 2.0 or done >= goal:
            shown["at"] = time.monotonic()
            err.print(f"verify-log {period}: replayed {done:,} of at most {goal:,} readings messages", highlight=False)

    err.print(f"verify-log {period}: replaying {sum(ends.values()):,} readings messages at most into a scratch "
              "database", highlight=False)
    with open_database(f"chdb://{directory / 'clickhouse'}") as scratch:
        replayed = replay_log(scratch, rules, settings, period, ends, progress=progress)
        facts, books_charges, books_documents = _project_books(scratch, settings, period)
    (directory / _RESULT).write_bytes(orjson.dumps({
        "facts": facts, "books_charges": books_charges, "documents": books_documents,
        "period": replayed.period, "rules_revision": replayed.rules_revision, "messages": replayed.messages,
        "corrections": replayed.corrections, "corrections_applied": replayed.corrections_applied,
        "charges": {t: f"{a:.2f}" for t, a in replayed.charges.items()},
    }))
