"""Live spend and billing events on the real parts (issue 15): a fresh Kafka broker, chDB,
`gpubill` as child processes, the tracker's table and its changelog.

The readings are the fault suite's fleet (faults_helpers.py), dated in the *current*
billing period so that the tracker prices them as month to date. In the test rules both
tenants pay ¥1 per rented second in every month of 31 days (acme A800-80G hourly
¥3600/h; beta RTX4090 monthly ¥2,678,400 / 2,678,400 s, less 10 %), energy costs
mJ × 1.12 × ¥330 / 3.6e9, VAT 6 %, each registered tenant has the ¥10 trial credit.

What each case shows:
- thresholds crossed during a drain are emitted exactly once each, and a second drain adds none;
- a worker killed with SIGKILL three times while crossing thresholds emits no duplicate and
  misses none, and the table holds every second and millijoule once;
- a tracker killed with SIGKILL once it committed part of the spend topic is replaced by one
  that recovers its table from the changelog: every event once, none missing;
- when a period is invoiced, the table's lines for it are the invoice's lines before credits.
The first two run twice: with the tracker in its own process (`gpubill spend-tracker
--drain` after each worker drain, the default) and inline in the worker
(GPUBILL_SPEND_TRACKER=inline, as `gpubill up` runs it). Two workers sharing the partitions
are in test_spend_two_workers.py.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest

from schemas.topics import spend_topic
from tests.e2e.faults_helpers import (
    PERIOD,
    Card,
    committed_total,
    dumps,
    expected_invoice,
    fen,
    fleet,
    kill9,
    kill_draining_worker,
    make_readings,
    truth_of,
    wait_until,
    watts_of,
)
from tests.e2e.test_faults import SEED, drain, replay

pytestmark = pytest.mark.e2e

SHANGHAI = timedelta(hours=8)


@pytest.fixture(params=["separate", "inline"])
def tracker_mode(request, gpubill) -> str:
    gpubill.env["GPUBILL_SPEND_TRACKER"] = request.param
    return request.param


def drain_and_track(gpubill) -> None:
    """A worker drain, then — with the tracker in its own process — a tracker drain: every
    spend round the worker produced is folded and the events due are emitted."""
    drain(gpubill)
    if gpubill.env.get("GPUBILL_SPEND_TRACKER", "separate") == "separate":
        assert "caught up" in gpubill.run("spend-tracker", "--drain", timeout=240).stdout


def current_start(seconds: int) -> datetime:
    """A start such that `seconds` of readings end a minute ago and lie in one billing month
    (Asia/Shanghai); skips the test in the first hours of a month, when they would not."""
    start = (datetime.now(UTC) - timedelta(seconds=seconds + 60)).replace(microsecond=0)
    if (start + SHANGHAI).month != (datetime.now(UTC) + SHANGHAI).month:
        pytest.skip("too close to the start of a billing month for readings of this month")
    return start


def period_of(moment: datetime) -> str:
    return (moment + SHANGHAI).strftime("%Y-%m")


def readings_from(start: datetime, seconds: int, cards: list[Card], first: int = 0) -> list[dict]:
    """make_readings' layout, dated from `start` instead of May 2026."""
    out = []
    for i in range(first, seconds):
        ts = (start + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for card in cards:
            common = {"ts": ts, "site": "gz-guian", "node": f"gz-n{card.gpu[0]}", "gpu_uuid": card.gpu}
            if card.usage:
                tenant = card.tenant_at(i)
                out.append({"kind": "usage", "event_id": f"{card.gpu}-u-{start:%d%H%M}-{i}", **common,
                            "gpu_model": card.model, "tenant": tenant, "instance": f"i-{card.gpu}" if tenant else None,
                            "util_pct": i % 101, "mem_used_mib": 1024})
            out.append({"kind": "power", "event_id": f"{card.gpu}-p-{start:%d%H%M}-{i}", **common,
                        "power_w": Decimal(watts_of(card, i))})
    return out


def billing_events(bootstrap: str) -> list[dict]:
    """Every message on gpu.billing-events.v1, parsed."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        partitions = [TopicPartition("gpu.billing-events.v1", p)
                      for p in sorted(consumer.partitions_for_topic("gpu.billing-events.v1") or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        return [json.loads(message.value) for message in consumer]
    finally:
        consumer.close()


def event_keys(events: list[dict]) -> Counter:
    return Counter((e["tenant"], e["kind"], e["threshold"], e["period"]) for e in events)


def stream_figures(gpubill, tenant: str, period: str) -> dict:
    shown = gpubill.json("spend", "--tenant", tenant, "--stream", "--period", period, "--json")
    return shown["periods"].get(period, {})


def register(gpubill, *, acme_budget: str | None = None, beta_top_up: str | None = None) -> None:
    for tenant in ("acme", "beta"):
        gpubill.run("tenant", "add", tenant, "--name", tenant.title())
    if acme_budget:
        gpubill.run("budget", "set", "--tenant", "acme", "--amount", acme_budget)
    if beta_top_up:
        gpubill.run("balance", "topup", "--tenant", "beta", "--amount", beta_top_up, "--ref", "pay-e2e-1")


def month_to_date(truth, tenant: str) -> Fraction:
    """The tenant's invoice total for the readings, computed independently (faults_helpers)."""
    return Fraction(Decimal(expected_invoice(truth, tenant)["total"]))


def due(truth, *, acme_budget: Fraction, beta_top_up: Fraction, period: str) -> set:
    """The events the readings call for: acme's budget shares reached, beta's balance gone."""
    acme, beta = month_to_date(truth, "acme"), month_to_date(truth, "beta")
    expected = {("acme", "budget_threshold", str(pct), period) for pct in (50, 80, 100) if acme * 100 >= acme_budget * pct}
    if beta >= beta_top_up:
        expected.add(("beta", "balance_exhausted", "0", period))
    return expected


def assert_emitted_once(bootstrap: str, expected: set, period: str) -> Counter:
    seen = event_keys(billing_events(bootstrap))
    assert seen and max(seen.values()) == 1, seen  # nothing twice
    assert expected <= set(seen), seen  # nothing missing
    # beta may also have been seen low on runway before it ran out (when the tracker re-read
    # its burn mid-drain): the only other event allowed
    assert set(seen) - expected <= {("beta", "balance_low", "runway:24h", period)}, seen
    return seen


def assert_table_holds(gpubill, truth, period: str) -> None:
    """Every second and millijoule once in the tracker's table, priced as the invoice would."""
    for tenant in ("acme", "beta"):
        figures = stream_figures(gpubill, tenant, period)
        assert (figures["rented_seconds"], figures["energy_mj"]) == (truth.rent_seconds[tenant], truth.energy_mj[tenant])
        charged = {line["kind"]: line["amount"] for line in figures["lines"]}
        assert charged["rent"] == fen(Fraction(truth.rent_seconds[tenant]))  # ¥1 a second
        assert charged["electricity"] == fen(truth.electricity(tenant))


def ten_minutes_crossing_four_thresholds(gpubill, tmp_path):
    """Ten minutes of the fleet, this month, replayed to the broker with the two tenants
    registered so that four events are due; returns (start, cards, truth, period, expected)."""
    start = current_start(600)
    period = period_of(start)
    cards = fleet(600)
    readings = readings_from(start, 600, cards)
    truth = truth_of(readings)
    assert dict(truth.rent_seconds) == {"acme": 1500, "beta": 1200}  # 2.5 and 2 cards × 600 s
    # acme's budget is 90 % of its month to date: 50, 80 and 100 % are crossed; beta's
    # top-up covers 70 % of its month: its balance runs out.
    budget = Fraction(int(month_to_date(truth, "acme") * 9 / 10))
    top_up = Fraction(int(month_to_date(truth, "beta") * 7 / 10))
    register(gpubill, acme_budget=str(budget), beta_top_up=str(top_up))
    expected = due(truth, acme_budget=budget, beta_top_up=top_up, period=period)
    assert len(expected) == 4
    replay(gpubill, tmp_path / "readings.ndjson", [dumps(r) for r in readings])
    return start, cards, truth, period, expected


def test_thresholds_crossed_during_a_drain_are_emitted_once(gpubill, broker, tmp_path, tracker_mode):
    start, cards, truth, period, expected = ten_minutes_crossing_four_thresholds(gpubill, tmp_path)
    drain_and_track(gpubill)
    seen = assert_emitted_once(broker.bootstrap, expected, period)
    assert_table_holds(gpubill, truth, period)

    # more usage later: nothing is emitted again
    more = readings_from(start, 660, cards, first=600)
    replay(gpubill, tmp_path / "more.ndjson", [dumps(r) for r in more])
    drain_and_track(gpubill)
    assert event_keys(billing_events(broker.bootstrap)) == seen


def test_kill9_three_times_while_crossing_thresholds(gpubill, broker, tmp_path, tracker_mode):
    """SIGKILL the draining worker three times, 0–0.5 s after it committed progress, while
    the spend it produces crosses thresholds; then drain to the end. No event twice, none
    missing, and the table holds every second and millijoule once."""
    rng = random.Random(SEED + 15)
    seconds = 8000
    start = current_start(seconds)
    period = period_of(start)
    readings = readings_from(start, seconds, fleet(seconds))
    truth = truth_of(readings)
    assert dict(truth.rent_seconds) == {"acme": 20_000, "beta": 16_000}
    # acme's budget is 110 % of its month: 50 and 80 % are crossed, 100 % must not be (a
    # double count would cross it); beta's top-up covers 70 % of its month.
    budget = Fraction(int(month_to_date(truth, "acme") * 11 / 10))
    top_up = Fraction(int(month_to_date(truth, "beta") * 7 / 10))
    register(gpubill, acme_budget=str(budget), beta_top_up=str(top_up))
    expected = due(truth, acme_budget=budget, beta_top_up=top_up, period=period)
    assert len(expected) == 3 and ("acme", "budget_threshold", "100", period) not in expected
    # every insert 0.15 s slower (as in test_faults.py): the drain is still running at the third kill
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    (failpoints / "clickhouse-slow").write_text("0.15")
    gpubill.env["GPUBILL_FAILPOINTS"] = str(failpoints)
    replay(gpubill, tmp_path / "readings.ndjson", [dumps(r) for r in readings])

    at_kill = kill_draining_worker(gpubill, broker.bootstrap, broker.group, tmp_path / "worker.log", rng)
    print("committed offsets at each kill:", at_kill, "of", len(readings))
    assert 0 < at_kill[-1] < len(readings)

    del gpubill.env["GPUBILL_FAILPOINTS"]
    drain_and_track(gpubill)
    assert_emitted_once(broker.bootstrap, expected, period)
    assert_table_holds(gpubill, truth, period)


def test_a_tracker_killed_after_its_first_commit_is_replaced_from_its_changelog(gpubill, broker, tmp_path):
    """SIGKILL a running `gpubill spend-tracker` as soon as it has committed part of the spend
    topic, then drain a new one. What the first folded and committed is never read again by
    the second: it must come back from the table's changelog (streams/spend/table.py), or the
    events it calls for are missed. Every event once, the table every second once."""
    gpubill.env["GPUBILL_SPEND_TRACKER"] = "separate"
    _, _, truth, period, expected = ten_minutes_crossing_four_thresholds(gpubill, tmp_path)
    drain(gpubill)  # the worker alone: every spend round is on the topic

    spend, group = spend_topic(broker.group), f"{broker.group}.spend"
    with open(tmp_path / "tracker.log", "ab") as log:
        tracker = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "spend-tracker"], env=gpubill.env,
                                   cwd=gpubill.cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        committed = wait_until(lambda: tracker.poll() is not None or committed_total(broker.bootstrap, group, (spend,)) > 0,
                               120, 0.05)
        assert committed and tracker.poll() is None, (tmp_path / "tracker.log").read_text()[-3000:]
    finally:
        kill9(tracker)
    assert committed_total(broker.bootstrap, group, (spend,)) > 0

    assert "caught up" in gpubill.run("spend-tracker", "--drain", timeout=240).stdout  # a new tracker
    assert_emitted_once(broker.bootstrap, expected, period)
    assert_table_holds(gpubill, truth, period)


def test_table_totals_equal_the_invoice_at_period_end(gpubill, tmp_path):
    """May 2026, invoiced: the table's rent, discount and electricity lines for the period
    are the invoice's, to the fen and the sixth decimal of each quantity."""
    readings = make_readings(600)
    replay(gpubill, tmp_path / "readings.ndjson", [dumps(r) for r in readings])
    drain_and_track(gpubill)
    register(gpubill)
    assert "2 invoices created" in gpubill.run("invoice", "run", "--period", PERIOD).stdout
    for tenant in ("acme", "beta"):
        invoice = gpubill.json("invoice", "show", "--tenant", tenant, "--period", PERIOD, "--format", "json")
        charged = [(line["kind"], line["quantity"], line["unit_price"], line["amount"])
                   for line in invoice["lines"] if line["kind"] in ("rent", "discount", "electricity")]
        streamed = [(line["kind"], line["quantity"], line["unit_price"], line["amount"])
                    for line in stream_figures(gpubill, tenant, PERIOD)["lines"]]
        assert sorted(streamed) == sorted(charged), (streamed, charged)
        assert len(charged) == (3 if tenant == "beta" else 2)


def test_a_spend_topic_with_another_partition_count_is_refused(gpubill, broker):
    # The tracker places each tenant by GPUBILL_PARTITIONS (4 here): a spend topic made with 2
    # would put rounds where no tracker looks for them, so nothing starts on it.
    from schemas.topics import spend_topic
    from streams.kafka.admin import ensure_topics

    assert ensure_topics(broker.bootstrap, {spend_topic(broker.group): 2}) == {spend_topic(broker.group): 2}
    done = gpubill.run("spend-tracker", "--drain", check=False)
    assert done.returncode == 1, done.stderr
    assert f"{spend_topic(broker.group)} has 2 partitions and GPUBILL_PARTITIONS is 4" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
