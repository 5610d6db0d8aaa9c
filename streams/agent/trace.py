"""`--source trace:FILE`: a recorded trace replayed as if the cards reported it.

The trace contract (issue 39): one JSON object per line,

    ts            RFC 3339 with an offset, the sample time (the reading covers floor(ts))
    gpu_uuid      the card
    gpu_model     a catalog id or the card's own name (models.py maps it)
    util_pct      number 0–100          mem_used_mib  integer ≥ 0
    power_mw      integer ≥ 0           energy_mj     integer ≥ 0, cumulative
    energy_epoch  string, 1–128 chars, one counting run

A missing field (or null) is a metric the card did not report. A line that is not such an
object — not JSON, no ts or gpu_uuid, a field of the wrong type — is one `trace_line`
fault (a log line, the metric) and is skipped; the rest goes on.

Consecutive lines of the same second form one tick. A tick is due at the wall-clock time
`first tick's wall time + (its second − first second) / speed` (speed 0: at once). The
source's state is the byte offset after the last tick handed out: the agent keeps it in
the spool with the readings of that tick, so a restart goes on after the last line spooled.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Callable

from streams.agent.errors import SourceUnavailable
from streams.agent.metrics import Faults
from streams.agent.models import ModelMap
from streams.agent.readings import MAX_COUNTER_MJ, MAX_EPOCH_LEN, CardSample
from streams.agent.sources import Tick

MAX_LINE = 64 << 10  # a trace line longer than this is refused without being parsed


class BadLine(ValueError):
    """A trace line that is not a sample; the message says which field and why."""


def _int(document: dict[str, Any], name: str) -> int | None:
    value = document.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadLine(f"{name} must be a whole number ≥ 0, got {value!r}")
    return value


def parse_line(line: bytes, models: ModelMap) -> tuple[int, CardSample, list[str]]:
    """(second, sample, notes) of one trace line; BadLine when it is not a sample. `notes`
    name what the line leaves out or gets half ("counter_incomplete")."""
    if len(line) > MAX_LINE:
        raise BadLine(f"longer than {MAX_LINE} bytes")
    try:
        document = json.loads(line, parse_float=Decimal)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadLine(f"not JSON ({exc.__class__.__name__})") from None
    if not isinstance(document, dict):
        raise BadLine("not a JSON object")
    ts, uuid = document.get("ts"), document.get("gpu_uuid")
    if not isinstance(ts, str):
        raise BadLine("ts: missing or not a string")
    try:
        moment = datetime.fromisoformat(ts)
    except ValueError:
        raise BadLine(f"ts: {ts!r} is not RFC 3339") from None
    if moment.tzinfo is None:
        raise BadLine(f"ts: {ts!r} has no offset")
    second = int(moment.timestamp() // 1)  # floor, also before 1970
    if not isinstance(uuid, str) or not uuid or len(uuid) > 256:
        raise BadLine("gpu_uuid: missing, empty or longer than 256 characters")
    try:
        uuid.encode()
    except UnicodeEncodeError:
        raise BadLine("gpu_uuid: cannot be encoded (a lone surrogate); it cannot be a message key") from None
    model = document.get("gpu_model")
    if model is not None and not isinstance(model, str):
        raise BadLine(f"gpu_model must be a string, got {model!r}")
    util = document.get("util_pct")
    if util is not None and (isinstance(util, bool) or not isinstance(util, (int, Decimal))
                             or not 0 <= util <= 100):
        raise BadLine(f"util_pct must be a number 0–100, got {util!r}")
    mem, power, energy = _int(document, "mem_used_mib"), _int(document, "power_mw"), _int(document, "energy_mj")
    if energy is not None and energy > MAX_COUNTER_MJ:
        raise BadLine(f"energy_mj must be at most 2^63−1, got {energy}")
    epoch = document.get("energy_epoch")
    if epoch is not None and (not isinstance(epoch, str) or not 1 <= len(epoch) <= MAX_EPOCH_LEN):
        raise BadLine(f"energy_epoch must be a string of 1–{MAX_EPOCH_LEN} characters")
    notes = []
    if (energy is None) != (epoch is None):
        notes.append("counter_incomplete")  # they come together: the reading goes without a counter
        energy = epoch = None
    mapped = models.catalog_id(model)
    return second, CardSample(uuid, mapped or model, util, mem, power, energy, epoch), notes


class TraceSource:
    """Replays FILE at `speed` trace seconds per wall second (0: as fast as possible)."""

    name = "trace"

    def __init__(self, path: Path, *, models: ModelMap, faults: Faults, speed: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.path = Path(path)
        self.models = models
        self.faults = faults
        self.speed = speed
        self.clock = clock
        self.sleep = sleep
        self._handle: Any = None
        self._offset = 0  # after the last tick handed out
        self._line_no = 0  # of the last line handed out (for log lines after a restart)
        self._read_line_no = 0
        self._pending: tuple[int, int, int, CardSample, list[str]] | None = None  # a line read ahead
        self._start: tuple[float, int] | None = None  # (wall time, trace second) of the first tick
        self.exhausted = False

    def start(self, state: dict[str, Any]) -> None:
        """Open FILE and go to the offset in `state` (the last run's), SourceUnavailable when unreadable."""
        try:
            self._handle = open(self.path, "rb")
        except OSError as exc:
            raise SourceUnavailable(f"--source trace:{self.path}: cannot be read ({exc.strerror})") from None
        self._offset = int(state.get("offset", 0))
        self._line_no = self._read_line_no = int(state.get("line", 0))
        self._handle.seek(self._offset)

    def state(self) -> dict[str, Any]:
        """What the next run needs to go on after the last tick handed out."""
        return {"offset": self._offset, "line": self._line_no}

    def _next_line(self) -> tuple[int, int, int, CardSample, list[str]] | None:
        """The next sample line as (second, end offset, line number, sample, notes); blank
        lines are passed over, bad ones are faults, skipped."""
        while True:
            line = self._handle.readline()
            if not line:
                return None
            self._read_line_no += 1
            if not line.strip():
                continue
            try:
                second, sample, notes = parse_line(line.rstrip(b"\r\n"), self.models)
            except BadLine as exc:
                # Each bad line its own log line (a trace is a file: as many lines as it has bad ones).
                self.faults.report("trace_line", f"trace {self.path} line {self._read_line_no}: {exc}; skipped",
                                   key=str(self._read_line_no), line=self._read_line_no)
                continue
            return second, self._handle.tell(), self._read_line_no, sample, notes

    def due(self) -> bool:
        """True when the next tick can be handed out without waiting (speed 0)."""
        return self.speed == 0 and not self.exhausted

    def next_tick(self, after: int | None) -> Tick | None:
        """The next second's samples, when due; None once the trace is at its end."""
        first = self._pending or self._next_line()
        self._pending = None
        if first is None:
            self.exhausted = True
            return None
        second, end, line_no, sample, notes = first
        samples, all_notes = [sample], [(sample.gpu_uuid, n) for n in notes]
        while True:
            following = self._next_line()
            if following is None:
                break
            if following[0] != second:
                self._pending = following
                break
            _, end, line_no, sample, notes = following
            samples.append(sample)
            all_notes.extend((sample.gpu_uuid, n) for n in notes)
        self._wait_until_due(second)
        # A tick ends where its last line does: a restart reads the line read ahead again.
        self._offset, self._line_no = end, line_no
        return Tick(second, tuple(samples), tuple(all_notes))

    def _wait_until_due(self, second: int) -> None:
        if self.speed == 0:
            return
        if self._start is None:
            self._start = (self.clock(), second)
            return
        wall, first = self._start
        delay = wall + (second - first) / self.speed - self.clock()
        if delay > 0:
            self.sleep(delay)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
