"""Dunning on the real broker (issue 38, item 7): invoices issued 40 days ago by the real clock
(15 days' terms: 25 days past due today) under [dunning] overdue_days = [1, 7, 14] and
suspend_new_rentals_days = 20, `gpubill dunning run` as a user runs it, the billing events
read back from gpu.billing-events.v1, delivered by `gpubill events deliver`, and the notices
on the books — run twice, then the database lost and rebuilt from the log: never a duplicate.

t01 rents ¥100.00, t02 ¥200.00 (tests/unit/test_invoice_lock_runs.py's rows), VAT 6 %: totals
¥106.00 and ¥212.00. t02 is prepaid: registered (after its invoice: no trial credit on it) and
topped up ¥12.00, allocated to its invoice → ¥200.00 outstanding. Due at 25 days past due:
    t01  invoice_overdue 14 (the 1- and 7-day steps skipped: nothing sent before), suspend_new_rentals 20
    t02  invoice_overdue 14 — never a suspension (prepaid)
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta

import pytest

from billing.balances import top_up
from billing.invoicing import run_period
from billing.tenants import add_tenant
from billing_rules import load_rules
from schemas.billing_events import parse_event
from schemas.spend import spend_partition
from schemas.topics import TOPIC_BILLING_EVENTS
from tests.e2e.books_on import books_on
from tests.rules_copies import dunning_rules
from tests.unit.test_invoice_lock_runs import seed_tenants
from tests.unit.test_webhooks import SECRET, Receiver, answer, independent_signature_ok
from warehouse import writes
from warehouse.connection import open_database

pytestmark = pytest.mark.e2e


def events_on_the_topic(bootstrap: str) -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) of every message of gpu.billing-events.v1, from the beginning."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, allow_auto_create_topics=False)
    try:
        partitions = [TopicPartition(TOPIC_BILLING_EVENTS, p)
                      for p in sorted(consumer.partitions_for_topic(TOPIC_BILLING_EVENTS) or ())]
        if not partitions:  # no topic
            return []
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        found = []
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            for tp, records in consumer.poll(timeout_ms=1000).items():
                found += [(tp.partition, r.key, r.value) for r in records if r.offset < ends[tp]]
        return sorted(found)
    finally:
        consumer.close()


def test_overdue_invoices_get_their_events_once_each_across_runs_and_a_rebuild(gpubill, broker, tmp_path, monkeypatch):
    monkeypatch.setattr(writes, "MARGIN_S", 0)
    rules_dir = dunning_rules(tmp_path / "rules", "[1, 7, 14]", 20)
    rules = load_rules(rules_dir)
    gpubill.env["GPUBILL_RULES"] = str(rules_dir)
    issued = datetime.now(UTC) - timedelta(days=40)
    period = rules.period_of(int((issued - timedelta(days=40)).timestamp()))  # closed 40+ days before the issue
    year = issued.astimezone(rules.billing_tz).year
    t01, t02 = f"GB-{year}-000001", f"GB-{year}-000002"
    with open_database(gpubill.env["GPUBILL_CLICKHOUSE"]) as db, books_on(db, broker.bootstrap):
        seed_tenants(db, {"t01": 100, "t02": 200}, period=period)
        run_period(db, rules, period, now=issued)  # on the books: the invoices and their terms
        add_tenant(db, "t02", "Tenant Two", now=issued + timedelta(days=1))
        top_up(db, "t02", "12.00", "topup-t02", rules=rules, now=issued + timedelta(days=2))

    dry = gpubill.run("dunning", "run", "--dry-run").stdout.splitlines()
    assert [line.split(" (")[0] for line in dry[:-1]] == [
        f"due invoice_overdue 14 for {t01}", f"due suspend_new_rentals 20 for {t01}", f"due invoice_overdue 14 for {t02}"]
    assert events_on_the_topic(broker.bootstrap) == []  # a dry run sends nothing (the topic is not even made)

    first = gpubill.run("dunning", "run").stdout.splitlines()
    assert [line.split(" (")[0] for line in first[:-1]] == [
        f"sent invoice_overdue 14 for {t01}", f"sent suspend_new_rentals 20 for {t01}", f"sent invoice_overdue 14 for {t02}"]
    assert first[0].endswith(", 25 days past due, 106.00 CNY outstanding)")
    assert first[2].endswith(", 25 days past due, 200.00 CNY outstanding)")  # 212.00 − the 12.00 top-up
    assert first[-1].startswith("3 notices sent as of ")

    messages = events_on_the_topic(broker.bootstrap)
    events = sorted((parse_event(value) for _, _, value in messages), key=lambda e: (e.invoice, e.kind))
    assert [(e.kind, e.tenant, e.period, e.threshold, e.invoice, e.days_overdue, e.outstanding) for e in events] == [
        ("invoice_overdue", "t01", period, "14", t01, "25", "106.00"),
        ("suspend_new_rentals", "t01", period, "20", t01, "25", "106.00"),
        ("invoice_overdue", "t02", period, "14", t02, "25", "200.00")]
    # keyed by tenant, on the tenant's partition (GPUBILL_PARTITIONS=4), as the tracker places its events
    assert sorted((p, k) for p, k, _ in messages) == sorted(
        (spend_partition(e.tenant, 4), e.tenant.encode()) for e in events)
    ids = {e.event_id for e in events}
    assert len(ids) == 3

    # again: nothing due, nothing produced
    again = gpubill.run("dunning", "run").stdout.splitlines()
    assert len(again) == 1 and again[0].startswith("0 notices sent as of ")
    assert len(events_on_the_topic(broker.bootstrap)) == 3

    # the notices are facts on the books: the database lost and rebuilt from the log, still nothing due
    shutil.rmtree(tmp_path / "clickhouse")
    gpubill.run("rebuild", "--yes", "--books-only")
    assert gpubill.run("dunning", "run", "--dry-run").stdout.splitlines()[0].startswith("0 notices due as of ")
    assert gpubill.run("dunning", "run").stdout.splitlines()[0].startswith("0 notices sent as of ")
    assert len(events_on_the_topic(broker.bootstrap)) == 3

    # and the webhooks deliver them as they were produced
    gpubill.env["GPUBILL_WEBHOOK_SECRET"] = SECRET
    with Receiver(answer(200)) as receiver:
        done = gpubill.run("events", "deliver", "--drain", "--url", receiver.url, timeout=180)
    assert done.stdout.strip() == "3 events delivered, 0 given up", done.stderr
    assert {r.headers["Gpubill-Event-Id"] for r in receiver.received} == ids
    assert sorted(r.body for r in receiver.received) == sorted(value for _, _, value in messages)
    assert all(independent_signature_ok(r.headers, r.body, SECRET) for r in receiver.received)
