"""The trace source: the contract's lines, bad lines skipped, ticks, a restart's position (streams/agent/trace.py)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.models import ModelMap
from streams.agent.readings import CardSample
from streams.agent.trace import BadLine, TraceSource, parse_line
from tests.unit.agent_fakes import FakeClock

LINE = {"ts": "2026-03-01T00:00:05Z", "gpu_uuid": "GPU-a", "gpu_model": "A800-80G", "util_pct": 37.5,
        "mem_used_mib": 1024, "power_mw": 412_345, "energy_mj": 7_000_000, "energy_epoch": "boot-1"}


def line(**changes) -> bytes:
    document = {**LINE, **changes}
    return json.dumps({k: v for k, v in document.items() if v is not ...}).encode()


def test_a_full_line():
    second, sample, notes = parse_line(line(), ModelMap())
    assert second == 1772323205
    assert sample == CardSample("GPU-a", "A800-80G", Decimal("37.5"), 1024, 412_345, 7_000_000, "boot-1")
    assert notes == []


def test_fractions_and_offsets_cover_the_floor_second_in_utc():
    assert parse_line(line(ts="2026-03-01T08:00:05.999+08:00"), ModelMap())[0] == 1772323205


def test_missing_fields_are_metrics_not_reported():
    _, sample, notes = parse_line(line(util_pct=..., power_mw=None, energy_mj=..., energy_epoch=...), ModelMap())
    assert (sample.util_pct, sample.power_mw, sample.energy_mj, sample.energy_epoch) == (None, None, None, None)
    assert notes == []


def test_a_counter_without_its_epoch_goes_without_the_counter():
    _, sample, notes = parse_line(line(energy_epoch=...), ModelMap())
    assert (sample.energy_mj, sample.energy_epoch) == (None, None) and notes == ["counter_incomplete"]


def test_an_nvml_name_is_mapped():
    assert parse_line(line(gpu_model="NVIDIA GeForce RTX 4090"), ModelMap())[1].gpu_model == "RTX4090"


@pytest.mark.parametrize("raw, why", [
    (b"not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (line(ts=...), "ts: missing"),
    (line(ts="2026-03-01 00:00:05"), "has no offset"),
    (line(ts="yesterday"), "not RFC 3339"),
    (line(gpu_uuid=""), "gpu_uuid"),
    (line(gpu_uuid="\ud800"), "cannot be encoded"),
    (line(util_pct=101), "util_pct"),
    (line(util_pct="50"), "util_pct"),
    (line(util_pct=True), "util_pct"),
    (line(mem_used_mib=-1), "mem_used_mib"),
    (line(power_mw=412.5), "power_mw must be a whole number"),
    (line(power_mw=True), "power_mw"),
    (line(energy_mj=2 ** 63), "energy_mj must be at most"),
    (line(energy_epoch=""), "energy_epoch"),
    (line(energy_epoch="e" * 129), "energy_epoch"),
    (line(gpu_model=7), "gpu_model"),
])
def test_bad_lines(raw, why):
    with pytest.raises(BadLine, match=why):
        parse_line(raw, ModelMap())


def write_trace(path, seconds: int, cards: int = 2, bad_after: int | None = None) -> None:
    with open(path, "w") as handle:
        for s in range(seconds):
            for c in range(cards):
                handle.write(json.dumps({**LINE, "ts": f"2026-03-01T00:00:{s:02d}Z", "gpu_uuid": f"GPU-{c}"}) + "\n")
            if s == bad_after:
                handle.write("{broken\n\n")


def trace(path, speed: float = 0, clock: FakeClock | None = None, state: dict | None = None):
    faults = Faults(AgentMetrics())
    clock = clock or FakeClock(100.0)
    source = TraceSource(path, models=ModelMap(), faults=faults, speed=speed, clock=clock, sleep=clock.sleep)
    source.start(state or {})
    return source, faults


def test_lines_of_one_second_are_one_tick_and_a_bad_line_is_skipped(tmp_path):
    path = tmp_path / "t.ndjson"
    write_trace(path, 3, bad_after=0)
    source, faults = trace(path)
    ticks = []
    while (tick := source.next_tick(None)) is not None:
        ticks.append((tick.second - 1772323200, [s.gpu_uuid for s in tick.samples]))
    assert ticks == [(0, ["GPU-0", "GPU-1"]), (1, ["GPU-0", "GPU-1"]), (2, ["GPU-0", "GPU-1"])]
    assert faults.counts == {"trace_line": 1}
    assert source.exhausted


def test_a_restart_goes_on_after_the_last_tick_handed_out(tmp_path):
    path = tmp_path / "t.ndjson"
    write_trace(path, 4)
    source, _ = trace(path)
    source.next_tick(None)
    source.next_tick(None)
    state = source.state()
    assert state == {"offset": len(b"".join(path.read_bytes().splitlines(keepends=True)[:4])), "line": 4}
    again, _ = trace(path, state=state)
    assert [again.next_tick(None).second - 1772323200 for _ in range(2)] == [2, 3]
    assert again.next_tick(None) is None


def test_speed_paces_ticks_by_their_seconds(tmp_path):
    path = tmp_path / "t.ndjson"
    write_trace(path, 5)
    clock = FakeClock(100.0)
    source, _ = trace(path, speed=2, clock=clock)
    while source.next_tick(None) is not None:
        pass
    assert clock.now == pytest.approx(102.0)  # 4 trace seconds after the first, at 2 per wall second
    fast, _ = trace(path, speed=0, clock=FakeClock(100.0))
    assert fast.due()
