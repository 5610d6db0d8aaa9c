"""From the cards to the invoice (issue 39's "Done when"): `gpubill agent` replays a trace of
4 cards × 2 h into the real broker; the broker is stopped while the agent runs (for 15
minutes of the trace: 15 s of wall time at 60× speed) and the agent is killed with SIGKILL
once, then started again on its spool; then `worker --drain` and `invoice run`.

Checked against figures computed here, independently of the product: every reading of the
trace is stored once (none lost, none twice, no conflict, no dead letter); energy per tenant
and its measured / estimated split follow the counter rule of SPEC §4 walked here in plain
integers; the electricity lines of the invoices are those mJ × PUE × tariff with Fractions.

The trace (May 2026, the e2e rules: gz-guian PUE 1.12, ¥330/kWh flat; acme A800 ¥1/s):
  C1  A800  acme    counter throughout; its samples of seconds 1000–1002 are missing (a 3-second gap:
                    the counter measures those seconds; without a usage reading they are nobody's)
  C2  A800  acme    its counter falls to 123 at second 3600 (a reset, same epoch)
  C3  RTX   beta    the driver reloads at second 5000: counter from 17, epoch boot-2
  C4  A800  nobody  counter throughout, no counter on every 50th sample (the card did not report it)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from fractions import Fraction
from pathlib import Path

import pytest

from tests.e2e.faults_helpers import fen
from warehouse.connection import open_database

pytestmark = pytest.mark.e2e

START = datetime(2026, 5, 12, 1, 0, 0, tzinfo=timezone.utc)
SECONDS = 7200
CARDS = {"GPU-C1": ("A800-80G", "acme"), "GPU-C2": ("A800-80G", "acme"), "GPU-C3": ("RTX4090", "beta"),
         "GPU-C4": ("A800-80G", None)}
NAMES = {"A800-80G": "NVIDIA A800 80GB PCIe", "RTX4090": "NVIDIA GeForce RTX 4090"}
PUE, TARIFF, MJ_PER_KWH = Fraction(112, 100), Fraction(330), 3_600_000_000
SPEED = 60


def _mw(card: str, i: int) -> int:
    """Integer milliwatts that vary: A800 ~300 W, RTX ~400 W."""
    base = 300_000 if CARDS[card][0] == "A800-80G" else 400_000
    return base + (i * 7919 + len(card) * 131) % 90_000


def trace_samples() -> list[dict]:
    """The trace, in time order, as the agent's trace contract says."""
    counters = {card: 10**9 for card in CARDS}
    epochs = {card: "boot-1" for card in CARDS}
    out = []
    for i in range(SECONDS):
        for card, (model, _) in CARDS.items():
            mw = _mw(card, i)
            counters[card] += mw + (i % 7) * 11 - 33  # what it drew, give or take
            if card == "GPU-C2" and i == 3600:
                counters[card] = 123
            if card == "GPU-C3" and i == 5000:
                counters[card], epochs[card] = 17, "boot-2"
            if card == "GPU-C1" and 1000 <= i <= 1002:
                continue
            sample = {"ts": (START + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ"), "gpu_uuid": card,
                      "gpu_model": NAMES[model], "util_pct": i % 101, "mem_used_mib": 2048, "power_mw": mw}
            if not (card == "GPU-C4" and i % 50 == 49):
                sample |= {"energy_mj": counters[card], "energy_epoch": epochs[card]}
            out.append(sample)
    return out


def expected(samples: list[dict]) -> dict[str, dict[str, int]]:
    """Per tenant ('' = nobody): rented seconds, energy mJ and measured mJ, by SPEC §4's rule."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_card: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for s in samples:
        i = int((datetime.strptime(s["ts"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) - START).total_seconds())
        by_card[s["gpu_uuid"]].append((i, s))
    for card, rows in by_card.items():
        tenant = CARDS[card][1] or ""
        if tenant:
            out[tenant]["rent"] += len(rows)  # one usage reading per sample, rented all along
        prev = None
        for i, s in rows:
            ok = (prev is not None and "energy_mj" in s and "energy_mj" in prev[1]
                  and s["energy_epoch"] == prev[1]["energy_epoch"] and i - prev[0] <= 10
                  and 0 <= s["energy_mj"] - prev[1]["energy_mj"] <= 5_000_000 * (i - prev[0]))
            if ok:
                # split evenly over the seconds it covers, the remainder to the last; a second without
                # a sample has no usage reading either: its share is nobody's (unallocated)
                gap, rise = i - prev[0], s["energy_mj"] - prev[1]["energy_mj"]
                for second in range(prev[0] + 1, i + 1):
                    share = rise // gap + (rise % gap if second == i else 0)
                    owner = tenant if second == i else ""
                    out[owner]["energy"] += share
                    out[owner]["measured"] += share
            else:
                out[tenant]["energy"] += s["power_mw"]
            prev = (i, s)
    return out


def test_hand_figures_of_the_trace() -> None:
    figures = expected(trace_samples())
    # C1: 7197 samples, C2: 7200 → acme rents 14,397 s; C3: 7200 s for beta.
    assert figures["acme"]["rent"] == 14_397 and figures["beta"]["rent"] == 7200
    # Estimated: the cards' first seconds, C2's reset, C3's reload; of C4 its first second, the
    # samples without a counter (i % 50 = 49) and those right after them (their previous reading
    # has none) — everything else measured.
    assert figures["acme"]["energy"] > figures["acme"]["measured"] > 0
    estimated_c4 = figures[""]["energy"] - figures[""]["measured"]
    assert estimated_c4 == sum(_mw("GPU-C4", i) for i in range(SECONDS) if i == 0 or i % 50 in (49, 0))


def _agent(gpubill, trace: Path, assignments: Path, spool: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpubill.cli", "agent", "--source", f"trace:{trace}", "--assignments", str(assignments),
         "--site", "gz-guian", "--node", "gz-n1", "--spool", str(spool), "--speed", str(SPEED), "--metrics-port", "0"],
        env=gpubill.env, cwd=gpubill.cwd, stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def test_agent_trace_through_broker_outage_and_kill9_to_the_invoice(gpubill, broker, tmp_path) -> None:
    samples = trace_samples()
    truth = expected(samples)
    trace = tmp_path / "trace.ndjson"
    trace.write_text("".join(json.dumps(s) + "\n" for s in samples))
    assignments = tmp_path / "assignments.json"
    assignments.write_text(json.dumps({"cards": {card: {"tenant": tenant, "instance": f"i-{card}"}
                                                 for card, (_, tenant) in CARDS.items() if tenant}}))
    spool, log = tmp_path / "spool", tmp_path / "agent.log"

    agent = _agent(gpubill, trace, assignments, spool, log)
    time.sleep(25)  # ~25 trace-minutes sent
    assert agent.poll() is None, log.read_text()[-3000:]
    assert broker.down(wait_s=30)
    time.sleep(8)
    os.killpg(agent.pid, signal.SIGKILL)  # killed with unacknowledged readings in its spool
    agent.wait(timeout=30)
    agent = _agent(gpubill, trace, assignments, spool, log)
    time.sleep(7)  # 15 s without a broker in all: 15 trace-minutes spooled and not sent
    assert agent.poll() is None, log.read_text()[-3000:]
    assert broker.up(wait_s=120)
    assert agent.wait(timeout=600) == 0, log.read_text()[-3000:]  # the whole trace acknowledged

    drained = gpubill.run("worker", "--drain", timeout=600)
    assert "drained:" in drained.stdout, drained.stdout
    dsn = gpubill.env["GPUBILL_CLICKHOUSE"]
    with open_database(dsn) as db:
        # every reading once: one usage and one power reading per sample, none twice, none lost
        assert db.query("SELECT uniqExact(event_id), count() FROM readings_usage FINAL")[0] == (len(samples),) * 2
        assert db.query("SELECT uniqExact(event_id), count() FROM readings_power FINAL")[0] == (len(samples),) * 2
        assert db.query("SELECT count() FROM conflicts")[0][0] == 0
        assert db.query("SELECT count() FROM deadletters")[0][0] == 0
        stored = {t: (int(e), int(m)) for t, e, m in db.query(
            "SELECT tenant, sum(energy_mj), sumIf(energy_mj, measured = 1) FROM rated_seconds FINAL "
            "WHERE stream = 'energy' GROUP BY tenant")}
    assert stored == {t: (f["energy"], f["measured"]) for t, f in truth.items()}

    audited = gpubill.run("audit", "--period", "2026-05", check=False)
    assert audited.returncode == 0 and "clean" in audited.stdout, audited.stdout + audited.stderr
    for tenant in ("acme", "beta"):
        gpubill.run("tenant", "add", tenant, "--name", tenant.title())
    gpubill.run("invoice", "run", "--period", "2026-05")
    for tenant in ("acme", "beta"):
        shown = gpubill.json("invoice", "show", "--period", "2026-05", "--tenant", tenant, "--format", "json")
        [line] = [line for line in shown["lines"] if line["kind"] == "electricity"]
        mj = truth[tenant]["energy"]
        assert line["amount"] == fen(Fraction(mj) * PUE * TARIFF / MJ_PER_KWH), tenant
