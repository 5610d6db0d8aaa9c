"""Dunning (issue 38, item 7): billing_rules/dunning.py decides, billing/dunning.py sends, each once.

Part 1, the pure decision: an invoice of ¥106.00 due on 2026-04-17 under the policy
[1, 7, 14] and a suspension at 30 days — the edges of each day, catch-up after downtime, paid,
partially paid, credited, written-off, voided and prepaid-settled invoices, a prepaid tenant
never suspended, and each notice once given what was sent.
Part 2, the policy in billing.toml: hostile values refused whole, in one line.
Part 3, passes on the embedded ClickHouse with invoices of a real run (tests/unit/test_invoice_lock_runs.py's
rows: t01 rents ¥100.00, t02 ¥200.00 of March 2026; VAT 6 % → totals ¥106.00 and ¥212.00,
issued 2026-04-10, due 2026-04-25): events produced, then the notices on the books; a producer
that fails, a record that fails after the produce; payments, a write-off, a prepaid tenant;
the scheduler's job and `gpubill dunning run`.
Every expected figure is worked out by hand in a comment.
"""

from __future__ import annotations

import json
import logging
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal as D
from pathlib import Path

import pytest

import billing.scheduler as scheduler_module
from billing import books
from billing.dunning import DunningPass, due, run_dunning, sent_notices
from billing.invoicing import run_period
from billing.payments import record_payment, write_off
from billing.balances import top_up
from billing.tenants import add_tenant
from billing_rules import RuleSetInvalid, load_rules
from billing_rules.accounts import Allocation, InvoiceDoc, WriteOffDoc, invoice_states
from billing_rules.dunning import DunningPolicy, Notice, due_notices
from schemas.billing_events import encode_event, parse_event
from tests.chdb_template import migrated_dsn
from tests.rules_copies import TEST_RULES, dunning_rules
from tests.unit.cli_run import run_cli
from tests.unit.test_invoice_lock_runs import NOW, PERIOD, db, no_margin, seed_tenants  # noqa: F401 (fixtures)
from warehouse.connection import open_database

OVERDUE, SUSPEND = "invoice_overdue", "suspend_new_rentals"

# ================================================================== part 1: the pure decision

DUE = date(2026, 4, 17)
POLICY = DunningPolicy((1, 7, 14), 30)
NUMBER = "GB-2026-000001"


def invoice(number: str = NUMBER, tenant: str = "acme", total: str = "106.00", status: str = "issued",
            issued_on: date = date(2026, 4, 2), due_on: date = DUE) -> InvoiceDoc:
    return InvoiceDoc(number, tenant, "2026-03", status, issued_on, due_on, D(total))


def paid(amount: str, on: date = date(2026, 4, 20), number: str = NUMBER, kind: str = "payment",
         tenant: str = "acme") -> Allocation:
    return Allocation(tenant, number, kind, "pay-1", D(amount), on)


def decide(as_of: date, docs=None, *, sent=(), allocations=(), write_offs=(), policy=POLICY,
           prepaid=lambda tenant: False) -> list[tuple]:
    """(kind, invoice, days, days past due, outstanding) of each notice due on `as_of`."""
    docs = [invoice()] if docs is None else docs
    states = invoice_states(docs, allocations, write_offs, as_of)
    return [(n.kind, n.invoice, n.days, n.days_past_due, n.outstanding)
            for n in due_notices(docs, states, policy, sent, prepaid)]


def after(days: int) -> date:
    return DUE + timedelta(days=days)


def sent_for(*steps: int, suspended: bool = False) -> list[tuple[str, str, int]]:
    return [(NUMBER, OVERDUE, day) for day in steps] + ([(NUMBER, SUSPEND, 30)] if suspended else [])


@pytest.mark.parametrize(("late", "sent", "expected"), [
    (-5, [], []),  # not yet due
    (0, [], []),  # the due date itself: 0 days past due, not overdue
    (1, [], [(OVERDUE, 1)]),  # the day after: the first reminder
    (6, sent_for(1), []),  # between steps
    (7, sent_for(1), [(OVERDUE, 7)]),
    (13, sent_for(1, 7), []),
    (14, sent_for(1, 7), [(OVERDUE, 14)]),
    (29, sent_for(1, 7, 14), []),  # the last reminder sent, the suspension a day away
    (30, sent_for(1, 7, 14), [(SUSPEND, 30)]),
    (400, sent_for(1, 7, 14, suspended=True), []),  # everything sent: nothing more, ever
    # catch-up after downtime: the latest reminder only, the skipped ones never
    (20, [], [(OVERDUE, 14)]),
    (20, sent_for(1), [(OVERDUE, 14)]),
    (30, [], [(OVERDUE, 14), (SUSPEND, 30)]),
    (400, sent_for(1), [(OVERDUE, 14), (SUSPEND, 30)]),
    (45, sent_for(1, 7, 14), [(SUSPEND, 30)]),
])
def test_the_policy_days_and_their_edges(late, sent, expected):
    # nothing paid: the whole ¥106.00 is outstanding, `late` days past due
    assert decide(after(late), sent=sent) == [(kind, NUMBER, days, late, D("106.00")) for kind, days in expected]


def test_a_pass_every_day_sends_each_step_once_on_its_day():
    sent, seen = [], []
    for late in range(-16, 61):  # from the issue date to 60 days past due
        for kind, number, days, _, _ in decide(after(late), sent=sent):
            seen.append((late, kind, days))
            sent.append((number, kind, days))
    assert seen == [(1, OVERDUE, 1), (7, OVERDUE, 7), (14, OVERDUE, 14), (30, SUSPEND, 30)]


def test_passes_with_gaps_skip_the_missed_steps_and_never_send_them_later():
    sent, seen = [], []
    for late in (3, 20, 25, 40, 41):  # the scheduler was down from day 4 to day 19, and from 26 to 39
        for kind, number, days, _, _ in decide(after(late), sent=sent):
            seen.append((late, kind, days))
            sent.append((number, kind, days))
    assert seen == [(3, OVERDUE, 1), (20, OVERDUE, 14), (40, SUSPEND, 30)]


@pytest.mark.parametrize(("allocations", "write_offs", "expected_outstanding"), [
    ([paid("106.00")], [], None),  # paid in full on 04-20: nothing outstanding, nothing sent
    ([paid("50.00")], [], D("56.00")),  # partially paid: 106.00 − 50.00
    ([paid("106.00", on=after(41))], [], D("106.00")),  # paid, but after the day of the pass (day 40): not yet
    ([paid("50.00"), paid("-50.00", on=date(2026, 5, 1))], [], D("106.00")),  # a payment reversed: owed again
    ([paid("50.00")], [WriteOffDoc("acme", NUMBER, D("56.00"), date(2026, 5, 1))], None),  # the rest written off
    ([paid("50.00")], [WriteOffDoc("acme", NUMBER, D("56.00"), date(2026, 5, 1)),  # written off, then ¥6 recovered
                       WriteOffDoc("acme", NUMBER, D("-6.00"), date(2026, 5, 2), "pay-2")], D("6.00")),
    ([paid("106.00", kind="credit_note")], [], None),  # credited in full by a credit note
    ([paid("106.00", on=date(2026, 4, 2))], [], None),  # settled from prepaid credit at issue: nothing owed
    ([paid("6.00", on=date(2026, 4, 2))], [], D("100.00")),  # prepaid credit covered ¥6 of it
])
def test_only_what_is_outstanding_is_dunned(allocations, write_offs, expected_outstanding):
    found = decide(after(40), allocations=allocations, write_offs=write_offs)
    if expected_outstanding is None:
        assert found == []
    else:  # 40 days past due, nothing sent: the latest reminder and the suspension
        assert found == [(OVERDUE, NUMBER, 14, 40, expected_outstanding), (SUSPEND, NUMBER, 30, 40, expected_outstanding)]


@pytest.mark.parametrize("doc", [
    invoice(status="voided"),  # a voided invoice is corrected, not owed
    invoice(total="0.00"),  # nothing to pay
    invoice(issued_on=after(41), due_on=after(56)),  # issued after the day of the pass
])
def test_no_notice_for_an_invoice_not_owed(doc):
    assert decide(after(40), [doc]) == []


def test_a_prepaid_tenant_is_reminded_but_never_suspended():
    asked = []

    def prepaid(tenant: str) -> bool:
        asked.append(tenant)
        return tenant == "pre"

    docs = [invoice("GB-2026-000001", "post"), invoice("GB-2026-000002", "pre"),
            invoice("GB-2026-000003", "young", due_on=after(20))]  # due 20 days later: 20 days past due at day 40
    found = decide(after(40), docs, prepaid=prepaid)
    assert found == [
        (OVERDUE, "GB-2026-000001", 14, 40, D("106.00")), (SUSPEND, "GB-2026-000001", 30, 40, D("106.00")),
        (OVERDUE, "GB-2026-000002", 14, 40, D("106.00")),  # no suspension: prepaid
        (OVERDUE, "GB-2026-000003", 14, 20, D("106.00")),
    ]
    assert sorted(asked) == ["post", "pre"]  # asked once each, and only of tenants at the suspension day


def test_each_notice_is_due_until_sent_and_never_after():
    docs = [invoice("GB-2026-000001", "acme"), invoice("GB-2026-000002", "beta")]
    first = decide(after(30), docs)
    assert len(first) == 4
    sent = [(number, kind, days) for kind, number, days, _, _ in first]
    assert decide(after(30), docs, sent=sent) == []
    assert decide(after(30), docs, sent=sent[:1]) == first[1:]  # only what was not sent
    assert decide(after(365), docs, sent=sent) == []


def test_a_policy_changed_after_notices_were_sent():
    # sent under [1, 7, 14]: the 7-day reminder. Then the policy became [1, 5, 10], suspension at 45.
    policy = DunningPolicy((1, 5, 10), 45)
    sent = sent_for(1, 7, suspended=False)
    assert decide(after(8), sent=sent, policy=policy) == []  # step 5 is behind the 7 already sent
    assert decide(after(10), sent=sent, policy=policy) == [(OVERDUE, NUMBER, 10, 10, D("106.00"))]
    # a suspension sent under the old day is the invoice's suspension: not sent again at the new day
    sent = sent_for(1, 7, 14, suspended=True)
    assert decide(after(50), sent=sent, policy=policy) == []
    # no suspension in the policy: never one
    assert decide(after(50), policy=DunningPolicy((3,))) == [(OVERDUE, NUMBER, 3, 50, D("106.00"))]


def test_notices_come_in_tenant_due_date_invoice_order():
    docs = [invoice("GB-2026-000009", "beta"), invoice("GB-2026-000004", "acme", due_on=after(5)),
            invoice("GB-2026-000003", "acme")]
    assert [(n[1], n[0]) for n in decide(after(35), docs)] == [
        ("GB-2026-000003", OVERDUE), ("GB-2026-000003", SUSPEND), ("GB-2026-000004", OVERDUE),
        ("GB-2026-000004", SUSPEND), ("GB-2026-000009", OVERDUE), ("GB-2026-000009", SUSPEND)]


def test_a_notice_as_a_billing_event():
    notice = Notice(OVERDUE, NUMBER, "acme", "2026-03", 7, 9, DUE, D("56.5"))
    event = notice.event("2026-04-26T02:00:00.000Z")
    assert (event.kind, event.tenant, event.period, event.threshold, event.invoice, event.days_overdue,
            event.outstanding, event.due_date) == (OVERDUE, "acme", "2026-03", "7", NUMBER, "9", "56.50", "2026-04-17")
    assert parse_event(encode_event(event)) == event
    later = Notice(OVERDUE, NUMBER, "acme", "2026-03", 7, 10, DUE, D("50.00")).event("2026-04-27T02:00:00.000Z")
    assert later.event_id == event.event_id  # the same (kind, tenant, period, days, invoice): the same event


# ================================================================== part 2: the policy in billing.toml


def _rules_with(tmp_path: Path, table: str) -> Path:
    directory = tmp_path / "rules"
    if not directory.exists():
        import shutil

        shutil.copytree(TEST_RULES, directory)
    billing = directory / "billing.toml"
    billing.write_text(billing.read_text(encoding="utf-8") + "\n" + table, encoding="utf-8")
    return directory


def test_the_policy_loads_and_is_absent_by_default(tmp_path):
    assert load_rules(TEST_RULES).dunning is None
    rules = load_rules(dunning_rules(tmp_path / "rules"))
    assert rules.dunning == DunningPolicy((1, 7, 14), 30)
    assert load_rules(dunning_rules(tmp_path / "r2", "[1, 365]", None)).dunning == DunningPolicy((1, 365), None)
    assert load_rules(dunning_rules(tmp_path / "r3", "[" + ", ".join(map(str, range(1, 11))) + "]", 11)).dunning \
        == DunningPolicy(tuple(range(1, 11)), 11)


HOSTILE = [
    ("overdue_days = [7, 7]", "dunning.overdue_days[1]: 7 is not after overdue_days[0] (7); list the days in "
                              "increasing order, each once"),
    ("overdue_days = [14, 7]", "dunning.overdue_days[1]: 7 is not after overdue_days[0] (14)"),
    ("overdue_days = [0, 7]", "dunning.overdue_days[0]: input should be greater than or equal to 1, got '0'"),
    ("overdue_days = [-1]", "dunning.overdue_days[0]: input should be greater than or equal to 1, got '-1'"),
    ("overdue_days = [366]", "dunning.overdue_days[0]: input should be less than or equal to 365, got '366'"),
    ("overdue_days = []", "dunning.overdue_days: list should have at least 1 item"),
    ("overdue_days = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]", "dunning.overdue_days: list should have at most 10 items"),
    ("overdue_days = [7.0]", "dunning.overdue_days[0]: input should be a valid integer, got '7.0'"),
    ("overdue_days = [1e3]", "dunning.overdue_days[0]: input should be a valid integer"),
    ("overdue_days = [nan]", "dunning.overdue_days[0]: input should be a valid integer"),
    ('overdue_days = ["7"]', "dunning.overdue_days[0]: input should be a valid integer, got '7'"),
    ("overdue_days = [true]", "dunning.overdue_days[0]: input should be a valid integer"),
    ("overdue_days = 7", "dunning.overdue_days: input should be a valid list"),
    ("overdue_days = [" + "9" * 5000 + "]", "file: cannot be read: ValueError: Exceeds the limit (4300 digits)"),
    ("overdue_days = " + "[" * 5000 + "]" * 5000, "file: cannot be read: values nested too deeply"),
    ("suspend_new_rentals_days = 30", "dunning: missing key 'overdue_days'"),
    ("overdue_days = [7]\nsuspend_new_rentals_days = 7", "dunning.suspend_new_rentals_days: 7 must be after the first "
                                                          "reminder (overdue_days[0] = 7): a tenant is told before its "
                                                          "new rentals are refused"),
    ("overdue_days = [7]\nsuspend_new_rentals_days = 3", "dunning.suspend_new_rentals_days: 3 must be after"),
    ("overdue_days = [7]\nsuspend_new_rentals_days = 400", "dunning.suspend_new_rentals_days: input should be less "
                                                            "than or equal to 365"),
    ("overdue_days = [7]\nsuspend_new_rentals_days = 0", "dunning.suspend_new_rentals_days: input should be greater"),
    ("overdue_days = [7]\nsuspend_rentals_days = 30", "dunning: unknown key 'suspend_rentals_days'"),
    ("overdue_days = [7]\n[dunning.extra]\nx = 1", "dunning: unknown key 'extra'"),
]


@pytest.mark.parametrize(("body", "expected"), HOSTILE, ids=[f"hostile-{i}" for i in range(len(HOSTILE))])
def test_a_hostile_policy_refuses_the_rule_set_whole_in_one_line(tmp_path, monkeypatch, capsys, body, expected):
    directory = _rules_with(tmp_path, "[dunning]\n" + body + "\n")
    with pytest.raises(RuleSetInvalid):
        load_rules(directory)
    code, stdout, stderr = run_cli(monkeypatch, capsys, "rules", "check", str(directory))
    assert (code, stdout) == (1, "")
    assert stderr.count("\n") == 1 and len(stderr) < 600, stderr[:2000]
    assert stderr.startswith(f"error: {directory}/billing.toml: {expected}"), stderr


def test_a_dunning_value_that_is_not_a_table_is_refused(tmp_path):
    directory = _rules_with(tmp_path, "")
    billing = directory / "billing.toml"
    billing.write_text("dunning = 7\n" + billing.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(RuleSetInvalid, match="dunning: input should be a valid dictionary"):
        load_rules(directory)


# ================================================================== part 3: passes on the embedded ClickHouse

# t01: ¥100.00 rent + 6 % VAT = ¥106.00; t02: ¥200.00 + 6 % = ¥212.00. NOW = 2026-04-10T00:00Z
# (08:00 in Shanghai): both issued 2026-04-10, due 2026-04-25 (15 days' terms).
T01, T02 = "GB-2026-000001", "GB-2026-000002"
DUE_ON = date(2026, 4, 25)


def at(days_past_due: int) -> datetime:
    """10:00 in Shanghai on the day `days_past_due` after the due date."""
    return datetime(2026, 4, 25, 2, 0, tzinfo=UTC) + timedelta(days=days_past_due)


@pytest.fixture()
def rules(tmp_path):
    return load_rules(dunning_rules(tmp_path / "rules"))


@pytest.fixture()
def invoiced(db, rules):
    seed_tenants(db, {"t01": 100, "t02": 200})
    run_period(db, rules, PERIOD, now=NOW)
    assert sorted(tuple(r) for r in db.query("SELECT tenant, number, total FROM invoices FINAL")) == [
        ("t01", T01, D("106.00")), ("t02", T02, D("212.00"))]
    return db


class Producer:
    """Stands in for the broker: keeps what it acknowledged; `fail` refuses the next sends."""

    def __init__(self) -> None:
        self.events, self.tried, self.fail = [], [], False

    def send(self, events) -> None:
        self.tried += events
        if self.fail:
            raise ConnectionError("the broker went away")
        self.events += events


def on_books(db) -> list[tuple]:
    return sorted(tuple(r) for r in db.query(
        "SELECT invoice, tenant, kind, days, event_id, due_on FROM dunning_notices FINAL"))


def shown(events) -> list[tuple]:
    return [(e.kind, e.invoice, e.threshold, e.days_overdue, e.outstanding, e.due_date) for e in events]


def test_a_pass_produces_then_records_each_notice_once(invoiced, rules):
    db, producer = invoiced, Producer()
    assert run_dunning(db, rules, producer.send, now=at(0)).notices == ()  # the due date: nothing
    first = run_dunning(db, rules, producer.send, now=at(1))
    assert first.sent and first.as_of == date(2026, 4, 26)
    assert shown(producer.events) == [(OVERDUE, T01, "1", "1", "106.00", "2026-04-25"),
                                      (OVERDUE, T02, "1", "1", "212.00", "2026-04-25")]
    assert [e.tenant for e in producer.events] == ["t01", "t02"] and list(first.event_ids) == [
        e.event_id for e in producer.events]
    assert on_books(db) == [(T01, "t01", OVERDUE, 1, producer.events[0].event_id, DUE_ON),
                            (T02, "t02", OVERDUE, 1, producer.events[1].event_id, DUE_ON)]
    # the same day again, and the next: nothing (sent once)
    for days in (1, 2):
        assert run_dunning(db, rules, producer.send, now=at(days)).notices == ()
    assert len(producer.events) == 2


def test_a_producer_that_fails_records_nothing_and_the_next_pass_sends_the_same_events(invoiced, rules):
    db, producer = invoiced, Producer()
    producer.fail = True
    with pytest.raises(ConnectionError):
        run_dunning(db, rules, producer.send, now=at(7))
    assert on_books(db) == [] and len(producer.tried) == 2
    producer.fail = False
    run_dunning(db, rules, producer.send, now=at(8))  # a day later: the 7-day step still, seen at 8 days
    assert [e.event_id for e in producer.events] == [e.event_id for e in producer.tried[:2]]
    assert shown(producer.events) == [(OVERDUE, T01, "7", "8", "106.00", "2026-04-25"),
                                      (OVERDUE, T02, "7", "8", "212.00", "2026-04-25")]
    assert [r[4] for r in on_books(db)] == [e.event_id for e in producer.events]


def test_a_pass_that_dies_after_the_produce_sends_again_with_the_same_event_id(invoiced, rules):
    db, producer = invoiced, Producer()

    class DiesAfterTheFirst:
        """The books take one notice, then the process dies (nothing after it runs)."""

        def __init__(self) -> None:
            self.taken = 0

        def record(self, database, events) -> None:
            if self.taken:
                raise KeyboardInterrupt  # a kill: not an Exception
            books.UnloggedBooks().record(database, events)
            self.taken += 1

        def numbering(self, database) -> None:
            pass

    with books.using(DiesAfterTheFirst()), pytest.raises(KeyboardInterrupt):
        run_dunning(db, rules, producer.send, now=at(1))
    assert [r[0] for r in on_books(db)] == [T01]  # t02's event is on the topic, not on the books
    run_dunning(db, rules, producer.send, now=at(1))
    # at least once: t02's event produced twice, with one id; t01's once
    assert [(e.invoice, e.event_id) for e in producer.events] == [
        (T01, producer.events[0].event_id), (T02, producer.events[1].event_id), (T02, producer.events[1].event_id)]
    assert len(on_books(db)) == 2


def test_payments_and_a_write_off_change_what_is_dunned(invoiced, rules):
    db, producer = invoiced, Producer()
    # t01 pays in full, t02 pays ¥100.00 of ¥212.00, both on 2026-04-28 (3 days past due)
    for tenant in ("t01", "t02"):
        add_tenant(db, tenant, tenant.upper(), now=at(-10))  # registered after their invoices: no trial credit on them
    record_payment(db, rules, "t01", "106.00", "pay-t01", date(2026, 4, 28), invoices=[(T01, None)], now=at(3))
    record_payment(db, rules, "t02", "100.00", "pay-t02", date(2026, 4, 28), invoices=[(T02, None)], now=at(3))
    run_dunning(db, rules, producer.send, now=at(7))
    # t01: nothing outstanding. t02: 212.00 − 100.00 = 112.00, 7 days past due (the 1-day step skipped: none sent)
    assert shown(producer.events) == [(OVERDUE, T02, "7", "7", "112.00", "2026-04-25")]
    write_off(db, rules, T02, "uncollectible", now=at(10))
    assert run_dunning(db, rules, producer.send, now=at(40)).notices == ()  # written off: nothing outstanding
    assert len(producer.events) == 1


def test_a_prepaid_tenant_is_reminded_and_never_suspended(invoiced, rules):
    db, producer = invoiced, Producer()
    add_tenant(db, "t01", "Tenant One", now=at(-10))
    top_up(db, "t01", "6.00", "topup-1", rules=rules, now=at(-5))  # prepaid now: allocated to its invoice
    run_dunning(db, rules, producer.send, now=at(30))
    # t01: 106.00 − 6.00 = 100.00 outstanding, reminded, not suspended; t02: reminded and suspended
    assert shown(producer.events) == [(OVERDUE, T01, "14", "30", "100.00", "2026-04-25"),
                                      (OVERDUE, T02, "14", "30", "212.00", "2026-04-25"),
                                      (SUSPEND, T02, "30", "30", "212.00", "2026-04-25")]
    assert run_dunning(db, rules, producer.send, now=at(90)).notices == ()


def test_an_invoice_settled_from_prepaid_credit_is_never_dunned(db, rules):
    add_tenant(db, "t01", "Tenant One", now=NOW - timedelta(days=30))
    top_up(db, "t01", "500.00", "topup-1", rules=rules, now=NOW - timedelta(days=20))
    seed_tenants(db, {"t01": 100})
    run_period(db, rules, PERIOD, now=NOW)  # ¥100.00 − ¥10 trial credit = ¥90.00, +6 % = ¥95.40, from the ¥500 credit
    ((total, paid_, outstanding),) = db.query(
        "SELECT total, paid, outstanding FROM v_invoice_payments WHERE number = {n:String}", {"n": T01})
    assert (total, paid_, outstanding) == (D("95.40"), D("95.40"), 0)
    assert run_dunning(db, rules, Producer().send, now=at(60)).notices == ()


def test_rules_without_a_policy_send_nothing(invoiced):
    rules = load_rules(TEST_RULES)
    report = run_dunning(invoiced, rules, None, now=at(60))
    assert report == DunningPass(date(2026, 6, 24), (), (), sent=False, enabled=False)
    assert due(invoiced, rules, at(60)) == (date(2026, 6, 24), [])


def test_a_dry_run_sends_and_records_nothing_and_may_look_ahead(invoiced, rules):
    report = run_dunning(invoiced, rules, None, now=at(1), dry_run=True)
    assert [(n.invoice, n.kind, n.days) for n in report.notices] == [(T01, OVERDUE, 1), (T02, OVERDUE, 1)]
    assert not report.sent and on_books(invoiced) == [] and sent_notices(invoiced) == set()
    ahead = run_dunning(invoiced, rules, None, now=at(1), dry_run=True, as_of=date(2026, 5, 25))  # 30 days past due
    assert [(n.invoice, n.kind, n.days) for n in ahead.notices] == [
        (T01, OVERDUE, 14), (T01, SUSPEND, 30), (T02, OVERDUE, 14), (T02, SUSPEND, 30)]
    with pytest.raises(ValueError, match="another date is for a dry run"):
        run_dunning(invoiced, rules, Producer().send, now=at(1), as_of=date(2026, 5, 25))


# ------------------------------------------------------------------ the scheduler's job


def test_the_job_opens_the_books_and_the_producer_only_when_notices_are_due(invoiced, rules):
    db, producer, opened = invoiced, Producer(), []

    @contextmanager
    def open_books(rules_now):
        opened.append("books")
        with books.using(books.UnloggedBooks()):
            yield

    @contextmanager
    def open_events():
        opened.append("events")
        yield producer

    job = scheduler_module.run_dunning_due
    assert job(db, rules, now=at(0), open_books=open_books, open_events=open_events) == []
    assert opened == []  # nothing due: neither Kafka nor the books opened
    sent = job(db, rules, now=at(1), open_books=open_books, open_events=open_events)
    assert [(n.invoice, n.days) for n in sent] == [(T01, 1), (T02, 1)] and opened == ["books", "events"]
    assert len(on_books(db)) == 2 and len(producer.events) == 2
    assert job(db, rules, now=at(1), open_books=open_books, open_events=open_events) == []


def test_the_job_postpones_in_one_line_when_kafka_refuses(invoiced, rules, caplog):
    def refused():
        raise ConnectionRefusedError("no Kafka broker answers at 127.0.0.1:9\nstart one")

    with caplog.at_level(logging.WARNING, logger="gpubill.scheduler"):
        assert scheduler_module.run_dunning_due(invoiced, rules, now=at(1), open_events=refused) == []
    (record,) = caplog.records
    assert record.getMessage() == ("dunning: 2 notices postponed to the next hour: no Kafka broker answers at "
                                   "127.0.0.1:9 start one")
    assert on_books(invoiced) == []


def test_the_job_says_in_one_line_when_a_send_fails_and_the_next_hour_sends_again(invoiced, rules, caplog):
    producer = Producer()
    producer.fail = True

    @contextmanager
    def open_events():
        yield producer

    with caplog.at_level(logging.WARNING, logger="gpubill.scheduler"):
        assert scheduler_module.run_dunning_due(invoiced, rules, now=at(1), open_events=open_events) == []
    assert [r.getMessage() for r in caplog.records] == [
        "dunning: 2 notices not all sent, the next hour sends the rest again: the broker went away"]
    producer.fail = False
    assert len(scheduler_module.run_dunning_due(invoiced, rules, now=at(1), open_events=open_events)) == 2


def test_add_jobs_adds_the_dunning_job_given_a_producer():
    class Recorder:
        def __init__(self) -> None:
            self.jobs = []

        def add_executor(self, executor, alias) -> None:
            pass

        def add_job(self, func, trigger, *, executor, **options) -> None:
            self.jobs.append((options["id"], executor, str(trigger)))

    recorder = Recorder()
    scheduler_module.add_jobs(recorder, object(), lambda: load_rules(TEST_RULES), open_events=lambda: None)
    assert [(job, executor) for job, executor, _ in recorder.jobs] == [
        ("monthly-billing", scheduler_module.JOBS_EXECUTOR), ("hourly-rollups", scheduler_module.JOBS_EXECUTOR),
        ("dunning", scheduler_module.JOBS_EXECUTOR)]
    assert "minute='35'" in recorder.jobs[2][2]  # hourly, half an hour after the billing run's minute 5


# ------------------------------------------------------------------ gpubill dunning run


@pytest.fixture()
def cli_env(tmp_path, monkeypatch):
    """A database with t01's and t02's invoices issued 40 days ago by the real clock (so 25 days past due:
    the 14-day reminder is due, the 30-day suspension not yet), the dunning rules, a fake producer."""
    rules_dir = dunning_rules(tmp_path / "rules")
    rules = load_rules(rules_dir)
    issued = datetime.now(UTC) - timedelta(days=40)
    period = rules.period_of(int((issued - timedelta(days=40)).timestamp()))  # closed, its grace passed
    dsn = migrated_dsn(tmp_path / "cli")
    with open_database(dsn) as database:
        seed_tenants(database, {"t01": 100, "t02": 200}, period=period)
        run_period(database, rules, period, now=issued)
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", dsn)
    monkeypatch.setenv("GPUBILL_RULES", str(rules_dir))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    producer = Producer()

    @contextmanager
    def fake_producer(settings):
        yield producer

    monkeypatch.setattr("gpubill.cli.dunning._events_producer", fake_producer)
    return producer, period, dsn, rules


def test_the_command_dry_run_then_run_then_run_again(cli_env, monkeypatch, capsys):
    producer, period, dsn, rules = cli_env
    year = period[:4]
    code, out, err = run_cli(monkeypatch, capsys, "dunning", "run", "--dry-run")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith(f"due invoice_overdue 14 for GB-{year}-000001 (t01, due ")
    assert lines[0].endswith(", 25 days past due, 106.00 CNY outstanding)")
    assert lines[1].endswith(", 25 days past due, 212.00 CNY outstanding)")
    assert lines[2].startswith("2 notices due as of ") and lines[2].endswith("(dry run: nothing sent)")
    assert producer.tried == []

    code, out, err = run_cli(monkeypatch, capsys, "dunning", "run", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["sent"] is True and document["enabled"] is True
    assert [(n["kind"], n["tenant"], n["days"], n["days_past_due"], n["outstanding"]) for n in document["notices"]] == [
        (OVERDUE, "t01", 14, 25, "106.00"), (OVERDUE, "t02", 14, 25, "212.00")]
    assert [n["event_id"] for n in document["notices"]] == [e.event_id for e in producer.events]

    code, out, _ = run_cli(monkeypatch, capsys, "dunning", "run")
    assert code == 0 and out.splitlines() == [f"0 notices sent as of {document['as_of']}"]
    assert len(producer.events) == 2
    with open_database(dsn) as database:
        assert len(sent_notices(database)) == 2

    # five days later, 30 days past due: the suspensions (looked at ahead)
    ahead = (datetime.now(UTC) + timedelta(days=5)).astimezone(rules.billing_tz).date()
    code, out, _ = run_cli(monkeypatch, capsys, "dunning", "run", "--dry-run", "--as-of", ahead.isoformat())
    assert code == 0 and [line.split(" for ")[0] for line in out.splitlines()[:2]] == [
        "due suspend_new_rentals 30"] * 2


@pytest.mark.parametrize(("args", "message"), [
    (["--as-of", "2026-05-01"], "error: --as-of is for a dry run only (notices are sent as of today): add --dry-run"),
    (["--dry-run", "--as-of", "2026-5-1"], "error: --as-of '2026-5-1' is not a date YYYY-MM-DD"),
    # full-width digits, shown escaped (and the escape's backslash escaped by the one-line printer)
    (["--dry-run", "--as-of", "２０２６-05-01"], r"error: --as-of '\\uff12\\uff10\\uff12\\uff16-05-01' is not a date"),
])
def test_the_command_refuses_a_bad_as_of_in_one_line_before_opening_anything(tmp_path, monkeypatch, capsys, args,
                                                                             message):
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", f"chdb://{tmp_path / 'never'}")
    code, out, err = run_cli(monkeypatch, capsys, "dunning", "run", *args)
    assert (code, out) == (1, "") and err.count("\n") == 1 and err.startswith(message), err
    assert not (tmp_path / "never").exists()


def test_the_command_without_a_policy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GPUBILL_CLICKHOUSE", migrated_dsn(tmp_path / "db"))
    monkeypatch.setenv("GPUBILL_RULES", str(TEST_RULES))
    code, out, _ = run_cli(monkeypatch, capsys, "dunning", "run")
    assert (code, out) == (0, "dunning is off: billing.toml has no [dunning] table; nothing sent\n")
