"""The agent's loop: trace → readings → spool → Kafka, with Kafka away, a full spool, a restart
(streams/agent/agent.py, sender.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

from streams.agent.agent import Agent
from streams.agent.assignments import AssignmentsFile
from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.models import ModelMap
from streams.agent.run import AgentConfig, build_agent
from streams.agent.sender import Sender
from streams.agent.spool import Spool
from streams.agent.trace import TraceSource
from tests.unit.agent_fakes import FakeProducer

BASE = 1772323200  # 2026-03-01T00:00:00Z


def sample(second: int, card: int, **changes) -> dict:
    return {"ts": f"2026-03-01T00:{second // 60:02d}:{second % 60:02d}Z", "gpu_uuid": f"GPU-{card}",
            "gpu_model": "A800-80G", "util_pct": 50, "mem_used_mib": 100, "power_mw": 400_000 + card,
            "energy_mj": 1_000 + 400_000 * second, "energy_epoch": "boot-1", **changes}


def write_lines(path, documents) -> None:
    path.write_text("".join(json.dumps(d) + "\n" for d in documents))


class Rig:
    """An agent on a trace with a fake producer, driven round by round (no threads)."""

    def __init__(self, tmp_path, documents=None, *, max_bytes: int = 64 << 20, lines: int = 0) -> None:
        self.tmp_path = tmp_path
        self.trace = tmp_path / "trace.ndjson"
        if documents is not None:
            write_lines(self.trace, documents)
        (tmp_path / "assignments.json").write_text(json.dumps({"cards": {"GPU-0": {"tenant": "acme",
                                                                                    "instance": "i-0"}}}))
        self.producer = FakeProducer()
        self.max_bytes = max_bytes
        self.start()

    def start(self) -> None:
        self.metrics = AgentMetrics()
        self.faults = Faults(self.metrics)
        self.spool = Spool(self.tmp_path / "spool", max_bytes=self.max_bytes)
        self.sender = Sender(self.spool, lambda: self.producer, metrics=self.metrics, faults=self.faults,
                             sleep=lambda s: None)
        self.source = TraceSource(self.trace, models=ModelMap(), faults=self.faults, speed=0)
        assignments = AssignmentsFile(self.tmp_path / "assignments.json", faults=self.faults)
        assignments.load()
        self.agent = Agent(source=self.source, spool=self.spool, sender=self.sender, assignments=assignments,
                           metrics=self.metrics, faults=self.faults, site="guian-1", node="n1", max_batch_records=8)
        self.agent.open()

    def kill(self) -> None:
        """As a kill -9: nothing closed, nothing flushed; the lock goes with the process."""
        os.close(self.spool._lock_fd)

    def sample_all(self) -> None:
        while self.agent.round():
            pass

    def send_all(self) -> None:
        while self.spool.unacked:
            self.sender.send_once()

    def sent_ids(self) -> list[str]:
        return [json.loads(value)["event_id"] for _, _, value in self.producer.sent]


def ids_of(documents) -> list[str]:
    """The event ids a trace's lines must give, written out independently of the agent."""
    out = []
    for d in documents:
        second = BASE + int(d["ts"][14:16]) * 60 + int(d["ts"][17:19])
        out += [f"u:{d['gpu_uuid']}:{second}", f"p:{d['gpu_uuid']}:{second}"]
    return out


def test_every_reading_reaches_kafka_once_in_spool_order(tmp_path):
    documents = [sample(s, c) for s in range(10) for c in range(3)]
    rig = Rig(tmp_path, documents)
    rig.sample_all()
    assert rig.spool.unacked == 60
    rig.send_all()
    assert rig.sent_ids() == ids_of(documents)
    topics = [topic for topic, _, _ in rig.producer.sent]
    assert topics == ["gpu.usage.v1", "gpu.power.v1"] * 30
    assert {key for _, key, _ in rig.producer.sent} == {b"GPU-0", b"GPU-1", b"GPU-2"}
    first = json.loads(rig.producer.sent[0][2])
    assert (first["tenant"], first["instance"], first["site"], first["node"]) == ("acme", "i-0", "guian-1", "n1")
    assert json.loads(rig.producer.sent[2][2])["tenant"] is None  # GPU-1 is nobody's
    assert rig.metrics.acked._value.get() == 60 and rig.spool.unacked == 0


def test_kafka_away_then_back_loses_nothing_and_keeps_each_cards_order(tmp_path):
    documents = [sample(s, c) for s in range(20) for c in range(2)]
    rig = Rig(tmp_path, documents)
    rig.sample_all()
    rig.producer.down = True
    for _ in range(3):
        assert rig.sender.send_once() == 0
    assert rig.faults.counts == {"kafka": 3} and rig.spool.unacked == 80
    rig.producer.down = False
    rig.producer.fail_after = 7  # it comes back flaky: a round half acknowledged
    rig.sender.send_once()
    assert rig.spool.unacked == 73
    rig.producer.fail_after = None
    rig.send_all()
    ids = rig.sent_ids()
    assert ids == ids_of(documents)  # nothing lost, nothing twice (the failed ones were never taken)
    for card in ("GPU-0", "GPU-1"):
        seconds = [int(i.rsplit(":", 1)[1]) for i in ids if f":{card}:" in i and i.startswith("p:")]
        assert seconds == sorted(seconds)


def test_a_restart_after_a_kill_goes_on_after_the_last_spooled_line(tmp_path):
    documents = [sample(s, c) for s in range(12) for c in range(2)]
    rig = Rig(tmp_path, documents)
    for _ in range(2):  # two rounds of 8 readings (4 lines each): 8 lines spooled
        rig.agent.round()
    rig.sender.send_once()  # Kafka acknowledged those 16
    rig.agent.round()  # 4 more lines spooled, not sent
    sent_before = list(rig.producer.sent)
    rig.kill()
    rig.start()
    assert rig.spool.unacked == 8
    rig.sample_all()
    rig.send_all()
    assert rig.producer.sent[:len(sent_before)] == sent_before
    assert rig.sent_ids() == ids_of(documents)  # every line once: none re-read, none skipped


def test_a_second_not_after_a_cards_last_is_not_sampled_again(tmp_path):
    documents = [sample(5, 0), sample(6, 0), sample(3, 0), sample(6, 1), sample(7, 0)]
    rig = Rig(tmp_path, documents)
    rig.sample_all()
    rig.send_all()
    assert rig.sent_ids() == ids_of([documents[i] for i in (0, 1, 3, 4)])
    assert rig.faults.counts == {"clock_back": 1}


def test_what_a_card_did_not_report_makes_no_reading_and_is_counted(tmp_path):
    documents = [sample(0, 0, util_pct=None), sample(0, 1, power_mw=None), sample(0, 2, energy_epoch=None),
                 sample(0, 3, gpu_model="Tesla V100"), sample(1, 0, energy_mj=10), sample(2, 0, energy_mj=50_000_000)]
    rig = Rig(tmp_path, documents)
    rig.sample_all()
    rig.send_all()
    ids = rig.sent_ids()
    assert "u:GPU-0:1772323200" not in ids and "p:GPU-0:1772323200" in ids
    assert "u:GPU-1:1772323200" in ids and "p:GPU-1:1772323200" not in ids
    power_2 = json.loads(rig.producer.sent[ids.index("p:GPU-2:1772323200")][2])
    assert "energy_mj" not in power_2
    usage_3 = json.loads(rig.producer.sent[ids.index("u:GPU-3:1772323200")][2])
    assert usage_3["gpu_model"] == "Tesla V100"  # sent as the card names itself: dead-lettered, not lost
    # GPU-0's counter: 1,000 mJ at 0 s, 10 at 1 s (fell), 50,000,000 at 2 s (a rise of 49,999,990 mJ in 1 s > 5,000 W)
    assert rig.faults.counts == {"not_reported": 2, "counter_incomplete": 1, "unknown_model": 1,
                                 "counter_reset": 1, "counter_jump": 1}


def test_past_its_cap_the_spool_stops_sampling_and_resumes_when_kafka_takes_it(tmp_path):
    documents = [sample(s, c) for s in range(150) for c in range(8)]  # 2,400 readings of ~300 bytes: ~700 KB
    rig = Rig(tmp_path, documents, max_bytes=256 << 10)
    rounds = 0
    while not rig.spool.full:
        assert rig.agent.round()
        rounds += 1
    position = rig.source.state()
    spooled = rig.spool.unacked
    for _ in range(3):
        assert rig.agent.round()
    assert rig.source.state() == position and rig.spool.unacked == spooled  # nothing sampled, nothing evicted
    assert rig.metrics.paused._value.get() == 1 and rig.faults.counts["spool_full"] == 3
    rig.agent.stop.wait = lambda timeout=None: False  # the paused rounds below need not wait their second
    while True:
        rig.send_all()
        if not rig.agent.round():
            break
    rig.send_all()
    assert rig.metrics.paused._value.get() == 0
    assert rig.sent_ids() == ids_of(documents)


def test_a_spool_that_cannot_be_written_keeps_the_batch_and_samples_nothing_new(tmp_path, monkeypatch):
    documents = [sample(s, 0) for s in range(30)]
    rig = Rig(tmp_path, documents)
    rig.agent.round()
    real = rig.spool.append
    monkeypatch.setattr(rig.spool, "append", lambda *a: (_ for _ in ()).throw(OSError(28, "No space left")))
    rig.agent.round()  # the batch is taken, the write fails: kept
    position = rig.source.state()
    rig.agent.round()
    assert rig.source.state() == position and rig.faults.counts == {"spool_write": 2}
    monkeypatch.setattr(rig.spool, "append", real)
    rig.sample_all()
    rig.send_all()
    assert rig.sent_ids() == ids_of(documents)


def test_run_with_a_trace_exits_0_once_everything_is_acknowledged(tmp_path):
    documents = [sample(s, c) for s in range(5) for c in range(2)]
    write_lines(tmp_path / "t.ndjson", documents)
    (tmp_path / "a.json").write_text('{"cards": {}}')
    producer = FakeProducer()
    config = AgentConfig(source=f"trace:{tmp_path / 't.ndjson'}", assignments=tmp_path / "a.json", site="guian-1",
                         node="n1", spool=tmp_path / "spool", speed=0)
    stop = threading.Event()
    timer = threading.Timer(20, stop.set)  # a hang fails the test instead of holding it
    timer.start()
    try:
        assert build_agent(config, stop=stop, connect=lambda: producer).run() == 0
    finally:
        timer.cancel()
    assert not stop.is_set()
    assert [json.loads(v)["event_id"] for _, _, v in producer.sent] == ids_of(documents)
    # run again: the trace is spooled and acknowledged, nothing is sent twice
    assert build_agent(config, connect=lambda: producer).run() == 0
    assert len(producer.sent) == 20


HEAVY = ("faust", "mode", "aiokafka", "clickhouse_connect", "chdb", "fastapi", "uvicorn", "pydantic", "pyarrow",
         "numpy", "schemas.events", "streams.rating", "streams.worker", "billing_rules", "warehouse")


def test_the_agent_imports_nothing_heavy():
    code = ("import sys, streams.agent.run, streams.agent.nvml, streams.agent.trace, gpubill.logs;"
            f"print([m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_command_imports_no_worker_client_or_http_stack():
    code = ("import sys; sys.argv = ['gpubill', 'agent', '--help'];"
            "from gpubill.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "import streams.agent.run\n"
            "print([m for m in sys.modules if m.split('.')[0] in ('faust', 'clickhouse_connect', 'chdb', 'fastapi',"
            " 'uvicorn', 'aiokafka') or m in ('schemas.events', 'streams.worker', 'streams.rating')])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"
