"""The pipeline under faults (issue 4): nothing lost, nothing counted twice, whatever breaks.

Every case runs on the real parts (a fresh Kafka broker, chDB in a tmp directory, the
`gpubill` command line as child processes) and ends the same way: `gpubill audit` is
clean, the rated seconds and millijoules per tenant equal the batch join computed here in
plain Python, and the May 2026 invoices equal figures computed here with Fractions
(tests/e2e/faults_helpers.py says how). In the test rules both tenants pay ¥1 per rented
second in May (acme A800-80G hourly ¥3600/h; beta RTX4090 monthly ¥2,678,400 over the
2,678,400 s of May, less its 10 % discount); energy costs mJ × 1.12 × ¥330 / 3.6e9; each
tenant's first invoice spends the ¥10 trial credit (both are registered before the invoice
run; acme's onboarding credit expired with March); VAT 6 %.

Longer than 400 lines on purpose: one file per fault suite, each case a short scenario on
the shared set-up of faults_helpers.py, read top to bottom as the list of faults survived.

The workers run with the product's consumer session of 10 s (streams/kafka/feeder.py): with
Faust's default of 60 s, a worker started after a SIGKILL waited ~55 s for the dead
member's session to expire before it got its partitions (measured while writing this).

Two workers in one consumer group with a rebalance are in test_two_workers.py: embedded
chDB allows one process per database, so there the workers share it through
`gpubill clickhouse serve`.

Randomness (kill moments, duplicates, shuffles) comes from random.Random(seed); the seed
is GPUBILL_FAULTS_SEED (default 20260512) and is printed, so a failure can be replayed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from tests.e2e.faults_helpers import (
    PERIOD,
    committed_total,
    count_rows,
    dumps,
    expected_invoice,
    fleet,
    invoice_figures,
    kill9,
    kill_draining_worker,
    make_readings,
    produce_raw,
    start_worker,
    stored_figures,
    stored_measured,
    truth_figures,
    truth_of,
    ts_of,
    wait_until,
    write_ndjson,
)

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("GPUBILL_FAULTS_SEED", "20260512"))


@pytest.fixture
def faults(gpubill, broker):
    """The conftest's `gpubill`, printing the seed of this run."""
    print(f"GPUBILL_FAULTS_SEED={SEED}")
    return gpubill


def replay(gpubill, path: Path, lines: list[str]) -> None:
    write_ndjson(path, lines)
    gpubill.run("replay", str(path))


def drain(gpubill) -> str:
    done = gpubill.run("worker", "--drain", timeout=240)
    assert "drained:" in done.stdout, done.stdout
    return done.stdout


def assert_audit_clean(gpubill) -> None:
    audited = gpubill.run("audit", "--period", PERIOD, check=False)
    assert audited.returncode == 0 and "clean" in audited.stdout, audited.stdout + audited.stderr


def assert_billed_exactly(gpubill, truth, *, deadletters: int = 0) -> None:
    """Audit clean; seconds and mJ per tenant exact; no false conflicts; invoices to the fen."""
    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    assert "nothing to drain" in gpubill.run("worker", "--drain").stdout  # every offset was committed
    assert_audit_clean(gpubill)
    assert stored_figures(dsn) == truth_figures(truth)
    assert count_rows(dsn, "SELECT count() FROM conflicts FINAL") == 0
    assert count_rows(dsn, "SELECT count() FROM deadletters FINAL") == deadletters
    for tenant in ("acme", "beta"):  # registered and active: each first invoice spends the trial credit
        gpubill.run("tenant", "add", tenant, "--name", tenant.title())
    created = gpubill.run("invoice", "run", "--period", PERIOD)
    assert "2 invoices created" in created.stdout, created.stdout
    for tenant in ("acme", "beta"):
        shown = gpubill.json("invoice", "show", "--period", PERIOD, "--tenant", tenant, "--format", "json")
        assert invoice_figures(shown) == expected_invoice(truth, tenant), tenant


def test_expected_figures_by_hand():
    """The independent arithmetic, checked once by hand on 60 s of the fleet.

    acme: A1, A2 rented 60 s, A3 the first 30 s → 150 s = ¥150.00; beta: B1, B2 → 120 s
    = ¥120.00, discount −12.00. Energy, e.g. A1: Σ over i < 60 of (300 + i mod 13) W plus
    i·37 mod 1000 thousandths, plus 0.5 mW on odd seconds rounded up to 1 mW.
    """
    readings = make_readings(60)
    truth = truth_of(readings)
    assert dict(truth.rent_seconds) == {"acme": 150, "beta": 120}
    a1 = sum((300 + i % 13) * 1000 + (i * 37) % 1000 + i % 2 for i in range(60))
    a1_power = [r for r in readings if r["gpu_uuid"] == "A1" and r["kind"] == "power"]
    assert a1_power[1]["power_w"] == Decimal("301.0375")  # 301.0375 W → 301,037.5 mW → 301,038 mJ
    assert sum(int(Decimal(str(r["power_w"])) * 1000 + Decimal("0.5")) for r in a1_power) == a1
    # beta: 120 s → rent 120.00, discount −12.00; subtotal 120.00 + electricity; less ¥10 trial
    invoice = expected_invoice(truth, "beta")
    assert (invoice["rent"], invoice["discount"], invoice["credit"]) == ("120.00", "-12.00", "-10.00")
    electricity = Decimal(invoice["electricity"])
    net = Decimal("120.00") + electricity - Decimal("12.00") - Decimal("10.00")
    assert invoice["net"] == str(net)
    assert invoice["tax"] == str((net * Decimal("0.06")).quantize(Decimal("0.01"), rounding="ROUND_HALF_UP"))


# ------------------------------------------------------------------------- 1. kill -9


def test_kill9_three_times_during_a_drain(faults, broker, tmp_path):
    """SIGKILL the draining worker three times, each time 0–0.5 s after it was seen to
    commit progress (so rows are in ClickHouse whose offsets may not be committed yet),
    then drain to the end: every second counted once."""
    rng = random.Random(SEED + 1)
    # 15 readings per second of 8 cards: 120,000 readings. The native worker drains them in
    # about a second, so every insert is slowed by 0.15 s (failpoint clickhouse-slow, as in
    # the two-worker test): the drain is then still running at the third kill.
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    (failpoints / "clickhouse-slow").write_text("0.15")
    faults.env["GPUBILL_FAILPOINTS"] = str(failpoints)
    readings = make_readings(8000)
    truth = truth_of(readings)
    assert dict(truth.rent_seconds) == {"acme": 20_000, "beta": 16_000}  # 2.5 and 2 cards × 8,000 s
    replay(faults, tmp_path / "readings.ndjson", [dumps(r) for r in readings])

    at_kill = kill_draining_worker(faults, broker.bootstrap, broker.group, tmp_path / "worker.log", rng)
    print("committed offsets at each kill:", at_kill, "of", len(readings))
    assert at_kill == sorted(at_kill) and 0 < at_kill[-1] < len(readings)

    drain(faults)
    assert committed_total(broker.bootstrap, broker.group) == len(readings)
    assert_billed_exactly(faults, truth)


def test_kill9_inside_the_rollup_then_late_data(faults, tmp_path):
    """SIGKILL `gpubill rollup` after it wrote an hour's rows and before it published them
    (failpoint rollup-publish): the rows are never read, the invoice is exact. Then late data
    lands in hours already rolled up: they are read from the per-second rows until rolled up
    again, and the audit (which checks every published hour) stays clean."""
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    cards = fleet(660)
    readings = make_readings(600, cards)
    late = make_readings(660, cards, first=600)  # the next minute, in the same hour
    truth = truth_of(readings + late)
    replay(faults, tmp_path / "readings.ndjson", [dumps(r) for r in readings])
    drain(faults)

    (failpoints / "rollup-publish").write_text("60")
    rollup = subprocess.Popen([sys.executable, "-m", "gpubill.cli", "rollup"], env={
        **faults.env, "GPUBILL_FAILPOINTS": str(failpoints)}, cwd=faults.cwd, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    assert wait_until(lambda: (failpoints / "rollup-publish.reached").exists(), 120), "the rollup never got there"
    kill9(rollup)
    unpublished = count_rows(faults.env["GPUBILL_CLICKHOUSE"], "SELECT count() FROM rated_hours")
    assert unpublished > 0 and count_rows(faults.env["GPUBILL_CLICKHOUSE"], "SELECT count() FROM rollup_runs") == 0
    assert_audit_clean(faults)
    assert stored_figures(faults.env["GPUBILL_CLICKHOUSE"]) == truth_figures(truth_of(readings))

    assert "0 hours rolled up" not in faults.run("rollup").stdout
    replay(faults, tmp_path / "late.ndjson", [dumps(r) for r in late])
    drain(faults)
    assert_billed_exactly(faults, truth)  # the invoice run rolls the late hours up again first
    assert "0 hours rolled up" in faults.run("rollup").stdout


# ---------------------------------------------------------------- 2. ClickHouse down


def test_clickhouse_unavailable_then_restored(faults, broker, tmp_path):
    """While $GPUBILL_FAILPOINTS/clickhouse-down exists every insert fails as if ClickHouse
    were unreachable. (a) left in place: the drain retries for 60 s, exits 3, commits
    nothing. (b) removed after a few retries: the same drain resumes and completes, exit 0."""
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    faults.env["GPUBILL_FAILPOINTS"] = str(failpoints)
    down = failpoints / "clickhouse-down"
    # create the schema first: the migrations' own inserts would hit the failpoint
    assert "nothing to drain" in faults.run("worker", "--drain").stdout

    readings = make_readings(200)  # 3,000 readings
    truth = truth_of(readings)
    replay(faults, tmp_path / "readings.ndjson", [dumps(r) for r in readings])
    down.touch()

    # (a) ClickHouse never comes back: give up after ~60 s of backoff, commit nothing
    started = time.monotonic()
    gave_up = faults.run("worker", "--drain", check=False, timeout=120)
    waited = time.monotonic() - started
    print(f"drain gave up after {waited:.1f} s with exit {gave_up.returncode}")
    assert gave_up.returncode == 3, gave_up.stdout + gave_up.stderr
    assert waited < 75
    assert "retrying" in gave_up.stderr
    assert committed_total(broker.bootstrap, broker.group) == 0

    # (b) ClickHouse comes back while a drain is retrying: it resumes and completes
    log = tmp_path / "worker.log"
    worker = start_worker(faults, "--drain", log=log)
    assert wait_until(lambda: worker.poll() is not None or log.read_text().count("retrying") >= 2, 60), log.read_text()
    assert worker.poll() is None, log.read_text()  # still retrying, not exited
    assert committed_total(broker.bootstrap, broker.group) == 0
    down.unlink()
    assert worker.wait(timeout=60) == 0, log.read_text()
    assert "drained:" in log.read_text()
    assert committed_total(broker.bootstrap, broker.group) == len(readings)
    assert_billed_exactly(faults, truth)


# ------------------------------------------------------- 3. duplicates and shuffling


def test_duplicates_and_shuffling(faults, tmp_path):
    """10 % of the lines again, verbatim, and the whole file shuffled → the invoice of the
    distinct readings; then another 10 % arriving in a second replay to a new worker."""
    rng = random.Random(SEED + 3)
    readings = make_readings(120)  # 1,800 readings
    truth = truth_of(readings)
    lines = [dumps(r) for r in readings]

    first = lines + rng.sample(lines, len(lines) // 10)
    rng.shuffle(first)
    replay(faults, tmp_path / "shuffled.ndjson", first)
    drain(faults)
    assert_audit_clean(faults)
    assert stored_figures(faults.env["GPUBILL_CLICKHOUSE"]) == truth_figures(truth)

    again = rng.sample(lines, len(lines) // 10)
    rng.shuffle(again)
    replay(faults, tmp_path / "again.ndjson", again)
    drain(faults)
    assert_billed_exactly(faults, truth)


def test_counters_in_any_order(faults, tmp_path):
    """Power readings carrying the cards' counters (gaps, a driver reload, a reset, readings
    without a counter, a gap longer than 10 s; faults_helpers.counter_of), 10 % sent twice,
    shuffled, in two replays drained apart → energy per tenant and its measured share as the
    rule computed here says, and the invoices of the distinct readings to the fen."""
    rng = random.Random(SEED + 5)
    readings = make_readings(120, counters=True)
    truth = truth_of(readings)
    assert truth.measured_mj["acme"] and truth.measured_mj["beta"] and truth.measured_mj[""]
    assert truth.energy_mj["acme"] > truth.measured_mj["acme"]  # A3 never reports a counter
    lines = [dumps(r) for r in readings] + [dumps(r) for r in rng.sample(readings, len(readings) // 10)]
    rng.shuffle(lines)
    cut = len(lines) * 2 // 3
    replay(faults, tmp_path / "first.ndjson", lines[:cut])
    drain(faults)
    replay(faults, tmp_path / "second.ndjson", lines[cut:])
    drain(faults)
    assert stored_measured(faults.env["GPUBILL_CLICKHOUSE"]) == {t: mj for t, mj in truth.measured_mj.items() if mj}
    assert_billed_exactly(faults, truth)


# ------------------------------------------------------------------- 4. poison messages


def test_poison_messages_are_dead_lettered(faults, broker, tmp_path):
    """Odd but valid readings are billed; hostile ones go to the dead-letter table with a
    reason; the worker drains to the end either way."""
    readings = make_readings(60)  # 900 readings
    # valid, and billed: util_pct with 40 digits (kept to 4 decimals), a node with a NUL,
    # power_w with 40 significant digits: 300.1235000…0001 W → 300,123.5000…0001 mW → 300,124
    power = next(r for r in readings if r["kind"] == "power" and r["gpu_uuid"] == "A1")
    power["power_w"] = Decimal("300.1235000000000000000000000000000000001")
    usage = next(r for r in readings if r["kind"] == "usage" and r["gpu_uuid"] == "B1")
    usage["node"] = "gz-n\u0000B"
    truth = truth_of(readings)
    lines = [dumps(r) for r in readings]
    lines[2] = lines[2].replace('"util_pct": 0', '"util_pct": 99.99999999999999999999999999999999999999')
    assert '"util_pct": 99.9999' in lines[2]

    def bad(**fields) -> str:
        base = {"kind": "power", "event_id": "bad", "ts": ts_of(7), "site": "gz-guian", "node": "gz-nA",
                "gpu_uuid": "A2", "power_w": 100}
        return json.dumps(base | fields)

    poisons = {
        bad(event_id="huge").replace('"power_w": 100', '"power_w": 1e400'): "power_w: must be between 0 and 5000",
        bad(event_id="\ud800"): "event_id:",
        bad(event_id="x" * 129): "event_id:",
        bad(event_id="big-node", node="n" * 500_000): "node:",
        bad(event_id="digits").replace('"power_w": 100', '"power_w": 1' + "0" * 5000): "not JSON",
        bad(event_id="offset", ts="2026-05-12T01:00:07+24:00"): "ts:",
        bad(event_id="extra", extra=1): "extra",
        bad(event_id="nan").replace('"power_w": 100', '"power_w": NaN'): "not JSON",
    }
    mixed = list(lines)
    for position, poison in zip(range(50, 900, 100), poisons):
        mixed.insert(position, poison)
    replay(faults, tmp_path / "poisoned.ndjson", mixed)
    # straight onto the topics, past replay: a tombstone and a JSON null
    produce_raw(broker.bootstrap, [("gpu.power.v1", b"A1", None), ("gpu.usage.v1", b"A1", b"null")])
    drain(faults)

    dead = faults.json("dlq", "list", "--limit", "100", "--format", "json")
    reasons = sorted(d["reason"] for d in dead)
    assert len(dead) == len(poisons) + 2, reasons
    for expected in list(poisons.values()) + ["empty message (no value)", "a reading must be a JSON object"]:
        assert any(expected in reason for reason in reasons), (expected, reasons)
    assert_billed_exactly(faults, truth, deadletters=len(poisons) + 2)


POISON_THAT_STALLS = {
    # valid RFC 3339, in the past, but before every rule's effective_from (2025-01-01)
    "before the rules": b'{"kind":"power","event_id":"old","ts":"2020-01-01T00:00:00Z","site":"gz-guian",'
                        b'"node":"gz-nA","gpu_uuid":"A1","power_w":5}',
    # valid RFC 3339, before the epoch: a negative second
    "before 1970": b'{"kind":"usage","event_id":"neg","ts":"1969-12-31T23:59:59Z","site":"gz-guian","node":"gz-nA",'
                   b'"gpu_uuid":"A1","gpu_model":"A800-80G","tenant":"acme","instance":"i","util_pct":1,'
                   b'"mem_used_mib":1}',
    # bytes that are not UTF-8
    "not UTF-8": b'{"kind":"power","event_id":"\xff"}',
    # JSON nested deeper than the decoder's recursion limit
    "deeply nested": b'{"kind":"power","event_id":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


def near_limit_line() -> str:
    """A 1,048,000-byte power reading: Kafka takes it (the limit is 1,048,576 per request),
    but its dead letter, the same bytes plus the reason and source headers, does not fit."""
    base = {"kind": "power", "event_id": "big", "ts": ts_of(3), "site": "gz-guian", "node": "", "gpu_uuid": "A2",
            "power_w": 100}
    base["node"] = "n" * (1_048_000 - len(json.dumps(base)))
    return json.dumps(base)


def test_poison_messages_do_not_stall_the_worker(faults, broker, tmp_path):
    readings = make_readings(60)
    truth = truth_of(readings)
    lines = [dumps(r) for r in readings]
    lines.insert(450, near_limit_line())
    replay(faults, tmp_path / "readings.ndjson", lines)
    topic = {b"power": "gpu.power.v1", b"usage": "gpu.usage.v1"}
    produce_raw(broker.bootstrap, [(topic[b"usage" if b'"usage"' in v else b"power"], b"A1", v)
                                   for v in POISON_THAT_STALLS.values()])
    done = faults.run("worker", "--drain", check=False, timeout=90)  # ~10 s; a stall never ends
    assert done.returncode == 0, done.stderr[-3000:]
    assert_billed_exactly(faults, truth, deadletters=len(POISON_THAT_STALLS) + 1)


def test_a_drain_consumes_its_own_dead_letters(faults, broker):
    """The dead letters a drain produces come after the end offsets it started from; it
    consumes them too, so the next drain has nothing to do. (A CI run failed here once:
    with the poisons last in the stream, the drain stopped before its dead letters.)"""
    produce_raw(broker.bootstrap, [("gpu.power.v1", b"A1", POISON_THAT_STALLS["not UTF-8"])])
    # one row written with the rated batch, the same row again from gpu.deadletter.v1
    assert "drained: 2 rows written in 2 batches" in drain(faults)
    assert "nothing to drain" in faults.run("worker", "--drain").stdout
    assert count_rows(faults.env["GPUBILL_CLICKHOUSE"], "SELECT count() FROM deadletters FINAL") == 1


def test_replay_dead_letters_lines_it_cannot_send(faults, tmp_path):
    readings = make_readings(60)
    truth = truth_of(readings)
    lines = [dumps(r) for r in readings]
    lines.insert(300, json.dumps({"kind": "power", "event_id": "2MB", "node": "n" * 2_000_000}))
    lines.insert(600, '{"kind": "power", "event_id": ' + "[" * 100_000 + "]" * 100_000 + "}")
    write_ndjson(tmp_path / "readings.ndjson", lines)
    replayed = faults.run("replay", str(tmp_path / "readings.ndjson"))
    assert "2 dead-lettered by replay" in replayed.stdout
    drain(faults)
    assert_billed_exactly(faults, truth, deadletters=2)


# --------------------------------------------- 4b. the same poisons, one batch at a time


@pytest.fixture
def in_process_pipeline(tmp_path):
    """The worker's Pipeline on its own chDB, without Kafka: `handle` is what a batch runs."""
    from billing_rules import load_rules
    from warehouse.connection import open_database
    from streams.pipeline import Pipeline
    from streams.rating.reference_batch import PythonRater
    from streams.sink import ClickHouseSink
    from tests.e2e.conftest import TEST_RULES

    rules = load_rules(TEST_RULES)
    database = open_database(f"chdb://{tmp_path / 'clickhouse'}")
    pipeline = Pipeline(rules=rules, sink=ClickHouseSink(database, max_wait_s=0), rater=PythonRater(rules))
    yield pipeline, database
    pipeline.executor.shutdown()
    database.close()


@pytest.mark.parametrize("name", list(POISON_THAT_STALLS))
def test_a_poison_is_dead_lettered_alone(in_process_pipeline, name):
    """One poison in a batch with a good power reading: the poison is dead-lettered (and
    stored), the good reading is rated."""
    from streams.kafka.message import Message

    pipeline, database = in_process_pipeline
    good = dumps(make_readings(1)[1]).encode()  # A1's power at 2026-05-12T01:00:00Z
    value = POISON_THAT_STALLS[name]
    topic = "gpu.usage.v1" if b'"usage"' in value else "gpu.power.v1"
    result = pipeline.handle([Message(topic, 0, 0, b"A1", value), Message("gpu.power.v1", 0, 1, b"A1", good)])
    assert [letter.message.offset for letter in result.deadletters] == [0]
    assert len(result.outcome.readings_power) == 1
    assert database.query("SELECT count() FROM deadletters FINAL") == [(1,)]


def test_power_is_quantized_half_up_exactly():
    """SPEC §4: power_w quantized to whole milliwatts, round half up, exactly.
    4999.9994999…9 W (35 significant digits) = 4,999,999.4999…9 mW → 4,999,999 mW."""
    from schemas.events import parse_reading

    raw = dumps({"kind": "power", "event_id": "p", "ts": ts_of(0), "site": "gz-guian", "node": "n", "gpu_uuid": "G",
                 "power_w": Decimal("4999.9994999999999999999999999999999")}).encode()
    reading = parse_reading(raw, known_sites={"gz-guian"}, known_models=set(), now_s=2**31, expect_kind="power")
    assert reading.power_mw == 4_999_999


# ---------------------------------------------------------- 5. batches with bad elements


def test_batches_with_bad_elements_in_a_normal_stream(faults, tmp_path):
    """Node gz-nA sends its three cards' power as one JSON array per second; some arrays
    carry bad elements, which are dead-lettered alone; everything else is billed."""
    readings = make_readings(60)
    truth = truth_of(readings)
    singles = [r for r in readings if not (r["kind"] == "power" and r["node"] == "gz-nA")]
    batches: dict[str, list] = {}
    for r in readings:
        if r["kind"] == "power" and r["node"] == "gz-nA":
            batches.setdefault(r["ts"], []).append(json.loads(dumps(r)))
    batch = [batches[ts_of(i)] for i in range(60)]

    def element(i: int, **fields) -> dict:
        return {"kind": "power", "event_id": f"bad-{i}", "ts": ts_of(i), "site": "gz-guian", "node": "gz-nA",
                "gpu_uuid": "A1", "power_w": 100} | fields

    batch[5].append(element(5, power_w=9000))                        # element 4
    batch[10].insert(1, "not a reading")                              # element 2
    batch[15].insert(0, element(15, power_w=-1))                      # element 1: first, yet routed by its kind
    batch[20].append({**usage_like(20), "event_id": "bad-20"})        # element 4: usage on the power topic
    batch[25].insert(2, {k: v for k, v in element(25).items() if k != "gpu_uuid"})  # element 3
    batch[30].append(element(30, site="mars-1"))                      # element 4
    expected = sorted([
        (4, "element 4: power_w: must be between 0 and 5000"),
        (2, "element 2: a reading must be a JSON object"),
        (1, "element 1: power_w: must be between 0 and 5000"),
        (4, "element 4: kind: a usage reading on the power topic"),
        (3, "element 3: gpu_uuid: missing field"),
        (4, "element 4: site: unknown site 'mars-1'"),
    ])
    lines = [dumps(r) for r in singles] + [json.dumps(b) for b in batch]
    random.Random(SEED + 5).shuffle(lines)
    replay(faults, tmp_path / "batched.ndjson", lines)
    drain(faults)

    dead = faults.json("dlq", "list", "--limit", "100", "--format", "json")
    got = sorted((d["source_index"], d["reason"]) for d in dead)
    assert len(got) == len(expected), got
    for (want_index, want), (index, reason) in zip(expected, got):
        assert index == want_index and reason.startswith(want), (want, reason)
    assert all(d["source_topic"] == "gpu.power.v1" for d in dead)
    assert_billed_exactly(faults, truth, deadletters=len(expected))


def usage_like(i: int) -> dict:
    return {"kind": "usage", "ts": ts_of(i), "site": "gz-guian", "node": "gz-nA", "gpu_uuid": "A1",
            "gpu_model": "A800-80G", "tenant": "acme", "instance": "i-A1", "util_pct": 1, "mem_used_mib": 1}


# ------------------------------------------------------------------ 6. broker restart


@pytest.mark.private_broker
def test_broker_restart_between_drains(faults, broker, tmp_path):
    """Drain the first half (all power, usage of the first 120 s), restart the broker, replay
    the rest (usage of the last 120 s, whose power was rated unallocated before the
    restart) and drain again: the late usage moves that energy to its tenants."""
    readings = make_readings(240)  # 3,600 readings
    truth = truth_of(readings)
    late = [r for r in readings if r["kind"] == "usage" and r["ts"] >= ts_of(120)]
    first = [r for r in readings if r not in late]
    replay(faults, tmp_path / "first.ndjson", [dumps(r) for r in first])
    drain(faults)
    assert_audit_clean(faults)
    unallocated_before = stored_figures(faults.env["GPUBILL_CLICKHOUSE"])[""][1]

    assert broker.down(wait_s=30)
    assert not broker.is_up()
    assert broker.up(wait_s=120)

    replay(faults, tmp_path / "late.ndjson", [dumps(r) for r in late])
    drain(faults)
    assert stored_figures(faults.env["GPUBILL_CLICKHOUSE"])[""][1] < unallocated_before
    assert_billed_exactly(faults, truth)
