"""`gpubill bench books`: the books' share of a rebuild (issue 37) — a year of monthly documents for 1,000 tenants.

On a private Kafka broker and a private chDB in a temporary directory:

1. **The year, on the books.** The facts of gpubill/bench/books_year.py (`tenants` tenants over
   `months` months: registrations, budgets, keys, top-ups, every month's invoices with their
   lines, billing runs, credit notes, voids and replacements) are recorded through the log's
   books as the commands open them (gpubill/cli/books.py `open_books`: the numbered series'
   writer, the rule set recorded), a command-sized batch at a time (`KafkaBooks.record`: one
   transaction, acks=all, then projected into the source database). This is the fast path to a
   year of books: it measures the rebuild, not invoicing (`gpubill bench month` times that).
2. **The rebuild, timed.** `gpubill rebuild --yes --books-only --into chdb://…` of an empty
   database, run as the operator runs it (a subprocess: start-up, the target migrated and found
   empty, the books projected from offset 0).
3. **Checked.** Every projected table of the rebuilt database equals the source's: rows and a
   hash of every column (`FINAL`), table by table.

Figures:

    facts, invoices, invoice_lines, credit_notes, voids, top_ups, keys, tenants   what the year holds
    messages          the topic's end offset: the facts and the transactions' commit markers
    topic_bytes       the partition's log segments on disk (its `.log` files)
    write_s           step 1, facts_written_per_s
    rebuild_s         step 2, the command's wall time; books_s the command's own figure (from its
                      start of work: the target migrated and checked, the books projected);
                      projected the facts it says it projected (facts + the rule set's)
    facts_per_s       projected / books_s; mb_per_s the topic's bytes / books_s
    identical         step 3: every table equal (tables: rows per table)
    target_met        rebuild_s ≤ 120 (the issue's target: two minutes)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from billing.books_projection import PROJECTED_TABLES
from billing_rules import DEFAULT_RULES_DIR
from gpubill.bench.books_year import YearOfBooks, year_of_books
from gpubill.bench.broker import bench_settings, private_broker
from gpubill.errors import GpubillError
from schemas.topics import TOPIC_BOOKS

__all__ = ["bench_books"]

Say = Callable[[str], None]
BROKER_PORT = 28692  # the private broker's (and + 1 its controller's): `gpubill bench books --port`
TARGET_S = 120.0  # issue 37: the books' share of a rebuild of a year of 1,000 tenants ≤ 2 minutes
YEAR = 2026


def bench_books(tenants: int = 1000, months: int = 12, *, port: int = BROKER_PORT, say: Say = lambda _: None) -> dict:
    """Write the year, rebuild the books from it, check; returns the figures `gpubill bench books --json` prints."""
    if not 1 <= months <= 12:
        raise GpubillError("--months: 1 to 12 (one year)")
    with tempfile.TemporaryDirectory(prefix="gpubill-bench-books-") as tmp:
        work = Path(tmp)
        with private_broker(work / "kafka", port, say) as broker:
            settings = bench_settings(broker.bootstrap, f"chdb://{work / 'source'}", work, rules=DEFAULT_RULES_DIR,
                                      group="bench-books")
            counts, write_s, source = _write_year(settings, tenants, months, say)
            messages = _end_offset(settings)
            topic_bytes = sum(f.stat().st_size for f in (broker.data_dir / f"{TOPIC_BOOKS}-0").glob("*.log"))
            say(f"rebuilding the books of {counts.facts:,} facts ({topic_bytes / 1e6:.1f} MB on the topic) into an "
                "empty database: gpubill rebuild --yes --books-only --into …")
            rebuild_s, projected, books_s = _rebuild(settings, f"chdb://{work / 'target'}")
            target = _fingerprints(f"chdb://{work / 'target'}")
    return {
        "tenants": tenants, "months": months, "facts": counts.facts, "invoices": counts.invoices,
        "invoice_lines": counts.invoice_lines, "credit_notes": counts.credit_notes, "voids": counts.voids,
        "top_ups": counts.top_ups, "keys": counts.keys, "messages": messages, "topic_bytes": topic_bytes,
        "write_s": round(write_s, 1), "facts_written_per_s": round(counts.facts / write_s),
        "rebuild_s": round(rebuild_s, 1), "books_s": books_s, "projected": projected,
        "facts_per_s": round(projected / books_s) if books_s else None,
        "mb_per_s": round(topic_bytes / 1e6 / books_s, 2) if books_s else None,
        "identical": target == source, "tables": {table: rows for table, (rows, _) in source.items()},
        "target_met": rebuild_s <= TARGET_S,
    }


def _write_year(settings: Any, tenants: int, months: int, say: Say) -> tuple[YearOfBooks, float, dict]:
    """Step 1 (module docstring); returns the counts, the seconds and the source's fingerprints."""
    from billing.invoice_store import seller_party
    from billing_rules import load_rules
    from gpubill.cli.books import open_books
    from warehouse.connection import open_database

    rules = load_rules(Path(settings.rules))
    seller = seller_party(rules.seller)
    counts = YearOfBooks()
    say(f"writing {months} months of books for {tenants:,} tenants through the log's books")
    with open_database(settings.clickhouse) as db:
        t0 = time.perf_counter()
        with open_books(db, settings, numbered=True, rules=rules) as log:
            log.numbering(db)  # the numbered series' writer, as a command starts it under the invoicing lease
            for batch in year_of_books(tenants, months, YEAR, rules.revision, seller, counts):
                log.record(db, batch)
        write_s = time.perf_counter() - t0
        say(f"{counts.facts:,} facts written in {write_s:.1f} s")
        return counts, write_s, _table_prints(db)


def _end_offset(settings: Any) -> int:
    from kafka import KafkaConsumer, TopicPartition

    from streams.kafka.settings import consumer_options

    consumer = KafkaConsumer(bootstrap_servers=settings.kafka, enable_auto_commit=False,
                             **consumer_options(settings, client="kafka-python"))
    try:
        tp = TopicPartition(TOPIC_BOOKS, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def _rebuild(settings: Any, into: str) -> tuple[float, int, float]:
    """Step 2: `gpubill rebuild --yes --books-only --into INTO`; (its wall time, the facts and seconds it printed)."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPUBILL_")},
           "GPUBILL_KAFKA": settings.kafka, "GPUBILL_CLICKHOUSE": settings.clickhouse, "GPUBILL_RULES": settings.rules,
           "GPUBILL_HOME": settings.home, "GPUBILL_METRICS_PORT": "0", "NO_COLOR": "1"}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "gpubill.cli", "rebuild", "--yes", "--books-only", "--into", into],
                          env=env, cwd=settings.home, capture_output=True, text=True)  # no ./gpubill.toml
    took = time.perf_counter() - t0
    if done.returncode:
        raise GpubillError(f"gpubill rebuild failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    said = re.search(r"books: ([\d,]+) facts? projected in ([\d.]+) s", done.stdout)
    if said is None:
        raise GpubillError(f"gpubill rebuild did not say what it projected: {done.stdout.strip()[-300:]}")
    return took, int(said.group(1).replace(",", "")), float(said.group(2))


def _fingerprints(dsn: str) -> dict[str, tuple[int, int]]:
    from warehouse.connection import open_database

    with open_database(dsn) as db:
        return _table_prints(db)


def _table_prints(db: Any) -> dict[str, tuple[int, int]]:
    """{table: (rows, hash of every row)} of every table the books project, as readers see them (FINAL)."""
    prints = {}
    for table in PROJECTED_TABLES:
        rows, hashed = db.query(f"SELECT count(), sum(cityHash64(*)) FROM {table} FINAL")[0]
        prints[table] = (int(rows), int(hashed or 0))
    return prints
