"""A host issuing invoice numbers in a loop, for tests/e2e/test_books_faults_e2e.py (issue 37).

    python tests/e2e/books_writer.py NAME COUNT PAUSE_S NUMBERS_FILE

Run with GPUBILL_KAFKA and GPUBILL_CLICKHOUSE (its own embedded database). It opens the books
as a numbered command does (streams/kafka/books.py `KafkaBooks(numbered=True)`, then `numbering`:
the transactional writer, which fences every earlier one, then the projection to the log's end),
and COUNT times: reads the next number from its own projection (billing/invoice_store.py
`next_number`, as an invoice run does), records an `invoice_issued` fact with it for tenant
NAME-i, appends the number to NUMBERS_FILE (so that the test can start a second host while
this one is mid-loop) and sleeps PAUSE_S. Exit 0 when all COUNT were recorded; exit 3 when
Kafka fenced it, the refusal's text on stderr.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from billing import books  # noqa: E402
from billing.invoice_store import next_number  # noqa: E402
from gpubill.config import load_settings  # noqa: E402
from schemas.books import InvoiceFact, InvoiceHeaderRow, JournalRow, Party  # noqa: E402
from streams.errors import BooksFenced  # noqa: E402
from streams.kafka.books import KafkaBooks  # noqa: E402
from warehouse.connection import open_database  # noqa: E402

YEAR, PERIOD = 2026, "2026-03"
FENCED_EXIT = 3


def issued(number: str, seq: int, tenant: str) -> InvoiceFact:
    """An invoice of ¥10.00 + 6 % VAT issued to `tenant` as `number`: header and journal (no lines)."""
    now = datetime.now(UTC)
    header = InvoiceHeaderRow(
        id=number, number=number, year=YEAR, seq=seq, tenant=tenant, period=PERIOD, status="issued", revision=1,
        replaces="", issued_at=now, updated_at=now, currency="CNY", subtotal=Decimal("10.00"),
        credit_used=Decimal("0.00"), net=Decimal("10.00"), tax=Decimal("0.60"), total=Decimal("10.60"),
        vat_rate=Decimal("0.0600"), rules_revision="test")
    journal = JournalRow(at=now, action="issued", invoice=number, document="", tenant=tenant, period=PERIOD,
                         actor="test:books_writer", reason="", detail="total 10.60 CNY")
    return InvoiceFact(kind="invoice_issued", header=header, journal=(journal,),
                       buyer=Party(details={"tenant": tenant}))


def main(name: str, count: int, pause_s: float, numbers_file: Path) -> int:
    settings = load_settings()
    with open_database(settings.clickhouse) as db, KafkaBooks(settings, numbered=True).open(db) as log:
        log.numbering(db)  # what the invoicing lease does first: the transactional writer, fencing the others
        for i in range(count):
            number, seq = next_number(db, YEAR)
            try:
                log.record(db, [books.event_of(issued(number, seq, f"{name}-{i}"))])
            except BooksFenced as exc:
                print(str(exc), file=sys.stderr)
                return FENCED_EXIT
            with numbers_file.open("a") as written:
                written.write(number + "\n")
            time.sleep(pause_s)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])))
