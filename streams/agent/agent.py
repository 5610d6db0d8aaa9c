"""The agent's loop: tick → readings → spool, while the sender empties the spool into Kafka.

Each round of `Agent.run`:

 1. re-read the assignments file if it changed (assignments.py);
 2. if the last batch could not be written (a full disk), write it again first; until it
    is written nothing new is sampled (the readings taken are kept, never dropped);
 3. if the spool is over its cap, sample nothing (`spool_full`: the metric
    gpubill_agent_sampling_paused, a log line a minute) until the sender shrinks it;
 4. take the next tick from the source (NVML: the next wall-clock second; a trace: its
    next second, at --speed), and for a trace at speed 0 every tick already due, up to
    `max_batch_records` readings;
 5. turn each card's sample into its readings (readings.py) — a card-second the agent
    already sampled (a clock that stepped back, a trace out of order) is a fault and not
    sampled again, and a sample that lacks what a reading needs makes no such reading (a
    fault) — and append them, with the agent's state, to the spool (fsync'd) in one write.

The state kept in the spool with each batch: the source's (a trace's position, NVML's
counter generations), each card's last second. A restart, or a kill -9, goes on from it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from streams.agent.assignments import AssignmentsFile
from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.models import CATALOG_IDS
from streams.agent.readings import (
    KIND_POWER, KIND_USAGE, MAX_POWER_MW, CardSample, power_reading, usage_reading,
)
from streams.agent.sender import Sender
from streams.agent.sources import Source, Tick
from streams.agent.spool import Record, Spool

log = logging.getLogger("gpubill.agent")

MAX_COUNTER_RISE_MJ_PER_S = 5_000_000  # 5,000 W: more than any card draws (billing_rules/counters.py)


class Agent:
    """One node's agent: `run` until stopped (NVML) or until a trace is spooled and acknowledged."""

    def __init__(self, *, source: Source, spool: Spool, sender: Sender, assignments: AssignmentsFile,
                 metrics: AgentMetrics, faults: Faults, site: str, node: str, stop: threading.Event | None = None,
                 max_batch_records: int = 2000, clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.spool = spool
        self.sender = sender
        self.assignments = assignments
        self.metrics = metrics
        self.faults = faults
        self.site = site
        self.node = node
        self.stop = stop or threading.Event()
        self.max_batch_records = max_batch_records
        self.clock = clock
        self.last: dict[str, int] = {}  # card → the last second sampled
        self.last_second: int | None = None  # the last second of any card
        self.counters: dict[str, tuple[int, str, int]] = {}  # card → (second, epoch, energy_mj) last seen
        self._pending: tuple[list[Record], dict[str, Any]] | None = None  # a batch the spool refused
        self.spooled = 0
        self.exhausted = False
        self._paused = False

    def _set_paused(self, paused: bool) -> None:
        self._paused = paused
        self.metrics.paused.set(int(paused))

    # ------------------------------------------------------------------ the loop

    def open(self) -> None:
        """Open the spool, resume its state, start the source (errors here are AgentError)."""
        state = self.spool.open()
        self.last = {k: int(v) for k, v in state.get("last", {}).items()}
        self.last_second = state.get("second")
        self.source.start(state.get("source", {}))
        self.metrics.source_ok.set(1)  # NVML: the binding passed its self-check (nvml.check_binding)
        log.info("gpubill agent started", extra={
            "source": self.source.name, "site": self.site, "node": self.node, "spool": str(self.spool.directory),
            "spooled_unacked": self.spool.unacked, "spool_bytes": self.spool.bytes})

    def run(self) -> int:
        """Sample until stopped; with a trace, until it is spooled and acknowledged. Exit status 0."""
        try:
            self.open()
            self.sender.start()
            while not self.stop.is_set():
                if not self.round():
                    break
            if self.exhausted:
                self._wait_acknowledged()
        finally:
            self.sender.stop()
            self.source.close()
            self._gauges()
            self.spool.close()
        return 0

    def round(self) -> bool:
        """One round (module docstring); False once the source has no more ticks."""
        self.assignments.refresh()
        self._gauges()
        if self._pending is not None:
            if not self._write(*self._pending):
                self.stop.wait(1.0)
                return True
        if self.spool.full:
            self._set_paused(True)
            self.faults.report("spool_full", f"spool {self.spool.directory} holds {self.spool.bytes} bytes, over "
                               f"--spool-max-mb: sampling stopped until Kafka takes {self.spool.unacked} readings",
                               key="full", level=logging.ERROR)
            self.stop.wait(1.0)
            return True
        if self._paused:
            log.warning("sampling resumed", extra={"spool_bytes": self.spool.bytes})
        self._set_paused(False)
        records: list[Record] = []
        tick = self.source.next_tick(self.last_second)
        if tick is None:
            self.exhausted = True
            return False
        records += self.readings(tick)
        while len(records) < self.max_batch_records and self.source.due():
            tick = self.source.next_tick(self.last_second)
            if tick is None:
                self.exhausted = True
                break
            records += self.readings(tick)
        self._write(records, self._state())
        return not self.exhausted

    def _state(self) -> dict[str, Any]:
        return {"source": self.source.state(), "last": dict(self.last), "second": self.last_second}

    def _write(self, records: list[Record], state: dict[str, Any]) -> bool:
        try:
            self.spool.append(records, state)
        except OSError as exc:
            self._pending = (records, state)
            self._set_paused(True)
            self.faults.report("spool_write", f"spool {self.spool.directory} cannot be written ({exc.strerror}): "
                               f"{len(records)} readings kept in memory, sampling stopped until it can",
                               key="write", level=logging.ERROR)
            return False
        self._pending = None
        self.spooled += len(records)
        for record in records:
            self.metrics.readings.labels(record.kind).inc()
        return True

    def _wait_acknowledged(self) -> None:
        """A trace at its end: wait until Kafka acknowledged every spooled reading."""
        while not self.stop.is_set() and (self._pending is not None or self.spool.unacked):
            if self._pending is not None:
                self._write(*self._pending)
            self._gauges()
            self.stop.wait(0.2)
        if not self.stop.is_set():
            log.info("trace replayed: every reading spooled and acknowledged", extra={"readings": self.spooled})

    def _gauges(self) -> None:
        self.metrics.spool_bytes.set(self.spool.bytes)
        self.metrics.spool_records.set(self.spool.unacked)
        self.metrics.oldest_unacked.set(self.spool.oldest_unacked_age_s())

    # ------------------------------------------------------------------ a tick's readings

    def readings(self, tick: Tick) -> list[Record]:
        """The usage and power readings of `tick`'s samples (faults counted on the way)."""
        for uuid, note in tick.notes:
            self.faults.report(note, f"card {uuid}: energy_mj and energy_epoch come together; the reading at "
                               f"{tick.second} goes without its counter", key=uuid)
        records: list[Record] = []
        second = tick.second
        for sample in tick.samples:
            uuid = sample.gpu_uuid
            last = self.last.get(uuid)
            if last is not None and second <= last:
                self.faults.report("clock_back", f"card {uuid}: second {second} is not after its last sampled "
                                   f"second {last}: not sampled again", key=uuid)
                continue
            self.last[uuid] = second
            self.metrics.samples.inc()
            key = uuid.encode()
            usage = self._usage(sample, second)
            if usage is not None:
                records.append(Record(KIND_USAGE, key, usage))
            if sample.power_mw is None:
                self.faults.report("not_reported", f"card {uuid} reported no power at {second}: no power reading",
                                   key=f"{uuid}/power")
            else:
                self._check_counter(sample, second)
                if sample.power_mw > MAX_POWER_MW:
                    self.faults.report("out_of_range", f"card {uuid} reported {sample.power_mw} mW at {second}, "
                                       "more than 5,000 W: sent as reported, the worker dead-letters it", key=uuid)
                records.append(Record(KIND_POWER, key, power_reading(sample, second, self.site, self.node)))
        if self.last_second is None or second > self.last_second:
            self.last_second = second
        self.metrics.cards.set(len(tick.samples))
        self.metrics.last_sample.set(second)
        return records

    def _usage(self, sample: CardSample, second: int) -> bytes | None:
        missing = [name for name, value in (("util_pct", sample.util_pct), ("mem_used_mib", sample.mem_used_mib),
                                            ("gpu_model", sample.gpu_model)) if value is None]
        if missing:
            self.faults.report("not_reported", f"card {sample.gpu_uuid} reported no {', '.join(missing)} at "
                               f"{second}: no usage reading", key=f"{sample.gpu_uuid}/usage")
            return None
        if sample.gpu_model not in CATALOG_IDS:
            self.faults.report("unknown_model", f"card {sample.gpu_uuid} is a {sample.gpu_model!r}, which no catalog "
                               "id names: its usage goes out with that name and is dead-lettered; add the name to "
                               "--model-map", key=sample.gpu_uuid)
        return usage_reading(sample, second, self.site, self.node, self.assignments.of(sample.gpu_uuid))

    def _check_counter(self, sample: CardSample, second: int) -> None:
        """Count a counter that falls within its epoch, or rises faster than 5,000 W: sent as
        reported either way (the rater falls back to power_w for such a second)."""
        if sample.energy_mj is None or sample.energy_epoch is None:
            return
        previous = self.counters.get(sample.gpu_uuid)
        self.counters[sample.gpu_uuid] = (second, sample.energy_epoch, sample.energy_mj)
        if previous is None or previous[1] != sample.energy_epoch:
            return
        gap, rise = second - previous[0], sample.energy_mj - previous[2]
        if rise < 0:
            self.faults.report("counter_reset", f"card {sample.gpu_uuid}: the energy counter fell from "
                               f"{previous[2]} to {sample.energy_mj} mJ within epoch {sample.energy_epoch!r}",
                               key=sample.gpu_uuid)
        elif gap <= 10 and rise > MAX_COUNTER_RISE_MJ_PER_S * gap:
            self.faults.report("counter_jump", f"card {sample.gpu_uuid}: the energy counter rose {rise} mJ in "
                               f"{gap} s, more than 5,000 W", key=sample.gpu_uuid)
