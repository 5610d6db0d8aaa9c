"""Live spend's pure parts: the record format, the money of a tenant's position, the events
due, and the worker's ledger (issue 15). Expected figures are worked by hand in comments."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction

import pytest

from billing_rules.spend import (
    AlertPolicy,
    EnergyTerms,
    PeriodSpend,
    RentTerms,
    SpendContext,
    due_events,
    position,
    spend_invoice,
)
from schemas.billing_events import event_id
from schemas.spend import InvalidSpendRecord, SpendRound, encode_round, parse_round, spend_partition
from schemas.topics import TOPIC_POWER, TOPIC_USAGE
from streams.spend.ledger import SpendLedger

A800 = RentTerms("A800-80G", "hourly", Decimal("10.000000"), 3600, Decimal("0.0000"))
GZ = EnergyTerms("gz1", "flat", Decimal("0.330000"), Decimal("1.1200"))
KWH_MJ = 3_600_000_000  # 1 kWh = 3.6e9 mJ


def _spend(seconds: int = 7200, mj: int = KWH_MJ) -> PeriodSpend:
    return PeriodSpend({A800: seconds}, {GZ: mj})


def test_spend_invoice_lines_are_the_invoice_lines():
    # 7200 s × ¥10/h = ¥20.00; 1 kWh IT × 1.12 × ¥0.33 = ¥0.3696 → ¥0.37; subtotal ¥20.37
    # VAT 6 %: 20.37 × 0.06 = 1.2222 → ¥1.22; total ¥21.59
    draft = spend_invoice("acme", "2026-03", _spend(), vat_rate=Decimal("0.06"))
    assert [(line.kind, line.amount) for line in draft.lines] == [("rent", Decimal("20.00")),
                                                                  ("electricity", Decimal("0.37"))]
    assert (draft.subtotal, draft.tax, draft.total) == (Decimal("20.37"), Decimal("1.22"), Decimal("21.59"))


def test_position_balance_and_runway():
    # month to date ¥21.59 (above); base ¥100.00 → balance 100 − 21.59 = ¥78.41
    # burn ¥10.60/h (¥10/h with 6 % VAT) → runway 78.41 / 10.6 = 7.397… h → 7.39 (down)
    context = SpendContext("acme", "2026-03", Decimal("0.06"), base=Decimal("100.00"), budget=Decimal("40.00"),
                           burn_per_hour=Fraction(1060, 100))
    where = position("acme", "2026-03", _spend(), context)
    assert where.month_to_date == Decimal("21.59")
    assert where.before_credits == Decimal("20.37")
    assert where.balance == Decimal("78.41")
    assert where.runway_hours == Decimal("7.39")


def test_position_spends_credits_before_vat():
    # ¥20.37 owed, ¥5.00 credit → net 15.37; VAT 0.9222 → 0.92; total ¥16.29
    from billing_rules import CreditBalance

    context = SpendContext("acme", "2026-03", Decimal("0.06"), credits=(CreditBalance("c1", "trial", Decimal("5.00")),))
    where = position("acme", "2026-03", _spend(), context)
    assert where.month_to_date == Decimal("16.29")
    assert where.before_credits == Decimal("20.37")
    assert where.balance is None and where.runway_hours is None  # not prepaid


@pytest.mark.parametrize("seconds, budget, expected", [
    # month to date with VAT (0 % here): 3600 s × ¥10/h = ¥10 per hour rented, energy 0
    (1799, "40.00", []),            # ¥5.00 (1799 s → 4.997… → ¥5.00) < 50 % of ¥40 = ¥20
    (7200, "40.00", ["50"]),        # ¥20.00 = 50 % exactly: crossed
    (11520, "40.00", ["50", "80"]),  # ¥32.00 = 80 %
    (14400, "40.00", ["50", "80", "100"]),  # ¥40.00
])
def test_budget_thresholds(seconds, budget, expected):
    context = SpendContext("acme", "2026-03", Decimal("0"), budget=Decimal(budget))
    where = position("acme", "2026-03", PeriodSpend({A800: seconds}, {}), context)
    due = due_events(where, AlertPolicy(), "2026-03-10T00:00:00.000Z")
    assert [e.threshold for e in due if e.kind == "budget_threshold"] == expected
    assert all(e.event_id == event_id(e.kind, "acme", "2026-03", e.threshold) for e in due)


def test_balance_events():
    policy = AlertPolicy(low_balance=Decimal("50.00"), low_runway_hours=24)
    # base ¥60, month to date ¥20 (7200 s, VAT 0) → balance ¥40 < ¥50; burn ¥10/h → runway 4 h < 24 h
    context = SpendContext("acme", "2026-03", Decimal("0"), base=Decimal("60.00"), burn_per_hour=Fraction(10))
    due = due_events(position("acme", "2026-03", PeriodSpend({A800: 7200}, {}), context), policy, "2026-03-10T00:00:00.000Z")
    assert sorted((e.kind, e.threshold) for e in due) == [("balance_low", "amount:50.00"), ("balance_low", "runway:24h")]
    assert due[0].balance == "40.00"
    # base ¥20 → balance ¥0: exhausted, not "low"
    context = SpendContext("acme", "2026-03", Decimal("0"), base=Decimal("20.00"), burn_per_hour=Fraction(10))
    due = due_events(position("acme", "2026-03", PeriodSpend({A800: 7200}, {}), context), policy, "2026-03-10T00:00:00.000Z")
    assert [(e.kind, e.threshold) for e in due] == [("balance_exhausted", "0")]


@pytest.mark.parametrize("kwargs", [{"budget_pct": (0,)}, {"budget_pct": (101,)}, {"budget_pct": (50, 50)},
                                    {"low_balance": Decimal("-1")}, {"low_balance": Decimal("1.001")},
                                    {"low_runway_hours": 0}])
def test_alert_policy_refuses_nonsense(kwargs):
    with pytest.raises(ValueError):
        AlertPolicy(**kwargs)


# -- the record --------------------------------------------------------------------------

ACME_PERIODS = {"2026-03": (((A800.gpu_model, A800.plan, A800.list_price, 3600, A800.discount_pct, 7200),),
                            ((GZ.site, GZ.band, GZ.tariff_per_kwh, GZ.pue, KWH_MJ),))}


def _round(**overrides) -> SpendRound:
    fields = dict(partition=3, spend_partition=6, marks=(10, 20), tenants={"acme": ACME_PERIODS},
                  oldest_ms=1, produced_ms=2)
    return SpendRound(**(fields | overrides))


def test_record_round_trip():
    spend_round = _round(tenants={"acme": ACME_PERIODS, "zeta": {"2026-03": ((), ())}})
    assert parse_round(encode_round(spend_round)) == spend_round
    assert spend_round.key == "3/6"
    assert [(r.tenant, r.partition, r.marks) for r in spend_round.records()] == [("acme", 3, (10, 20)),
                                                                                ("zeta", 3, (10, 20))]


def test_a_tenants_spend_partition_is_pinned():
    # CRC-32 (IEEE 802.3, as zlib) of the tenant's UTF-8, mod the partition count; a change would
    # move a tenant's records to another partition of a topic that is keyed by it:
    # crc32(b"acme") = 96,778,814 = 8 × 12,097,351 + 6; crc32(b"beta") = 2,408,645,731 = 8 × 301,080,716 + 3
    assert spend_partition("acme", 8) == 6
    assert spend_partition("beta", 8) == 3
    assert spend_partition("acme", 1) == 0


def test_record_decimal_never_written_with_an_exponent():
    spend_round = _round(tenants={"acme": {"2026-03": (((A800.gpu_model, "hourly", Decimal("9E+3"), 3600, Decimal("0"), 1),), ())}})
    raw = encode_round(spend_round)
    assert b'"9000"' in raw and b"E+" not in raw


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(version=1), "version"),
    (lambda d: d["tenants"].update({"../x": {}}), "tenant"),
    (lambda d: d.update(extra=1), "unknown field"),
    (lambda d: d.pop("marks"), "missing field"),
    (lambda d: d.update(spend_partition=-1), "spend_partition"),
    (lambda d: d["marks"].update(usage=-1), "marks.usage"),
    (lambda d: d["marks"].update(usage=1.5), "marks.usage"),
    (lambda d: d["tenants"]["acme"].update({"2026-13": {"rent": [], "energy": []}}), "YYYY-MM"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].__setitem__(2, "1e9"), "decimal string"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].__setitem__(2, "NaN"), "decimal string"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].__setitem__(2, 9), "decimal string"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].__setitem__(0, 7), "gpu_model"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["energy"][0].__setitem__(4, -5), "energy_mj"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["energy"][0].__setitem__(4, 2.5), "energy_mj"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].__setitem__(3, 0), "per_s"),
    (lambda d: d["tenants"].update(acme=[]), "periods"),
    # each goes past the one-test fast path of a row to the checks that name the field
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].pop(), "a rent row is"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["rent"][0].__setitem__(5, True), "seconds"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["energy"][0].__setitem__(1, "../x"), "band"),
    (lambda d: d["tenants"]["acme"]["2026-03"]["energy"][0].__setitem__(3, "1.12.1"), "pue"),
    (lambda d: d["tenants"]["acme"]["2026-03"].update(credits=[]), "unknown field"),
    (lambda d: d["tenants"]["acme"]["2026-03"].pop("energy"), "missing field"),
])
def test_record_refuses_hostile_input(mutate, message):
    document = json.loads(encode_round(_round()))
    mutate(document)
    with pytest.raises(InvalidSpendRecord, match=message):
        parse_round(json.dumps(document).encode())


def test_record_refuses_non_json_and_huge():
    with pytest.raises(InvalidSpendRecord, match="not JSON"):
        parse_round(b"\xff")
    with pytest.raises(InvalidSpendRecord, match="at most"):
        parse_round(b" " * (600 * 1024))
    with pytest.raises(InvalidSpendRecord, match="not JSON"):
        parse_round(b'{"version": 2, "partition": 1e999}')


# -- the ledger --------------------------------------------------------------------------

@dataclass
class _Contributions:
    rent: dict = field(default_factory=dict)
    energy: dict = field(default_factory=dict)


def _rent(tenant, partition, seconds, period="2026-03"):
    return {(tenant, partition, period, A800.gpu_model, A800.plan, A800.list_price, A800.per_s, A800.discount_pct): seconds}


def test_ledger_accumulates_and_marks_with_consumed_positions():
    ledger = SpendLedger(partitions=8)
    records = ledger.apply(_Contributions(rent=_rent("acme", 0, 100)), {(TOPIC_USAGE, 0): 50, (TOPIC_POWER, 0): 40})
    # acme's spend partition is 6 of 8 (test_a_tenants_spend_partition_is_pinned): key "0/6"
    assert [(r.key, r.marks, sorted(r.tenants)) for r in records] == [("0/6", (50, 40), ["acme"])]
    # a batch of power only: the usage mark stays at 50, power moves to 90; 100 + 20 s
    records = ledger.apply(_Contributions(rent=_rent("acme", 0, 20)), {(TOPIC_POWER, 0): 90})
    assert records[0].marks == (50, 90)
    assert records[0].tenants["acme"]["2026-03"][0][0][-1] == 120
    # nothing for the tenant: no record, but the positions still move
    assert ledger.apply(_Contributions(), {(TOPIC_USAGE, 0): 70}) == []
    assert ledger.apply(_Contributions(rent=_rent("acme", 0, 1)), {})[0].marks == (70, 90)


def test_a_round_carries_every_tenant_of_its_spend_partition_and_no_other():
    # crc32 mod 8: acme 6, beta 3 (pinned above); crc32(b"t-7") = 875,488,894 = 8 × 109,436,111 + 6
    assert spend_partition("t-7", 8) == 6
    ledger = SpendLedger(partitions=8)
    ledger.apply(_Contributions(rent=_rent("acme", 0, 100) | _rent("beta", 0, 5) | _rent("t-7", 0, 7)), {})
    # a batch that changes t-7 alone: one round, "0/6", with acme (unchanged, 100 s) and t-7 (7 + 3 s)
    (only,) = ledger.apply(_Contributions(rent=_rent("t-7", 0, 3)), {(TOPIC_USAGE, 0): 9})
    assert only.key == "0/6" and only.marks == (9, 0)
    assert {t: p["2026-03"][0][0][-1] for t, p in only.tenants.items()} == {"acme": 100, "t-7": 10}
    # the records per batch do not grow with tenants: 400 tenants t-0 … t-399 on source n mod 2
    # (200 per source; their crc32 mod 8 takes all 8 values on each): 2 × 8 rounds, carrying
    # the 400 and the three held on source 0 (acme, beta, t-7), whose rounds the batch touches
    assert {spend_partition(f"t-{n}", 8) for n in range(0, 400, 2)} == set(range(8))
    assert {spend_partition(f"t-{n}", 8) for n in range(1, 400, 2)} == set(range(8))
    many = _Contributions(rent={k: v for n in range(400) for k, v in _rent(f"t-{n}", n % 2, 1).items()})
    rounds = ledger.apply(many, {})
    assert len(rounds) == 16 and sum(len(r.tenants) for r in rounds) == 400 + 3


def test_ledger_takes_over_from_the_topic_and_filters_with_loaded_marks():
    ledger = SpendLedger(partitions=8)
    before = _round(partition=1, marks=(500, 400))
    other = _round(partition=2, marks=(9, 9))
    assert ledger.load([before, other], {1}) == 1
    assert ledger.filter_marks == {("acme", 1): (500, 400)}
    # this worker restarts below the marks (committed offsets are older): its marks never go back
    records = ledger.apply(_Contributions(rent=_rent("acme", 1, 10)), {(TOPIC_USAGE, 1): 450, (TOPIC_POWER, 1): 410})
    assert records[0].marks == (500, 410)
    assert records[0].tenants["acme"]["2026-03"][0][0][-1] == 7200 + 10
    assert ledger.filter_marks == {("acme", 1): (500, 400)}  # as loaded, for the rater, until the next load


def test_ledger_keeps_three_periods():
    ledger = SpendLedger(partitions=8)
    for period in ("2026-01", "2026-02", "2026-03", "2026-04"):
        records = ledger.apply(_Contributions(rent=_rent("acme", 0, 1, period)), {})
    assert sorted(records[0].tenants["acme"]) == ["2026-02", "2026-03", "2026-04"]


def test_the_spend_producer_refuses_to_send_once_stopped():
    # A worker that stops closes its spend producer (streams/worker.py, close_spend_producer);
    # a batch still in flight then fails to produce and stays uncommitted — it must not open
    # a new producer that nobody closes.
    import asyncio

    from streams.kafka.spend_producer import SpendProducer

    async def scenario() -> None:
        producer = SpendProducer("localhost:1", "g.spend.v2", 4, {})
        await producer.stop()  # never started: nothing to close
        await producer.send([])  # nothing to send: fine
        with pytest.raises(RuntimeError, match="stopped"):
            await producer.send([SpendRound(0, 1, (0, 0), {}, 0, 0)])
        assert producer._producer is None

    asyncio.run(scenario())
