"""The NVML source behind the seam, on a fake NVML module (streams/agent/nvml.py)."""

from __future__ import annotations

import pytest

from streams.agent.errors import SourceUnavailable
from streams.agent.metrics import AgentMetrics, Faults
from streams.agent.models import ModelMap
from streams.agent.nvml import CONSTANTS, FUNCTIONS, NvmlSource, check_binding
from tests.unit.agent_fakes import NVML_ERROR_GPU_IS_LOST, NVML_ERROR_UNKNOWN, FakeCard, FakeClock, FakeNvml

T0 = 1772323200.25  # a quarter into 2026-03-01T00:00:00Z


def source(nvml: FakeNvml, clock: FakeClock | None = None, state: dict | None = None,
           rescan_s: float = 30.0) -> tuple[NvmlSource, Faults]:
    clock = clock or FakeClock(T0)
    faults = Faults(AgentMetrics(), clock=clock)
    nvml_source = NvmlSource(models=ModelMap(), faults=faults, module=nvml, clock=clock, sleep=clock.sleep,
                             boot_id=lambda: "boot-1", rescan_s=rescan_s)
    nvml_source.start(state or {})
    return nvml_source, faults


def cards(n: int = 3) -> list[FakeCard]:
    return [FakeCard(f"GPU-{i}") for i in range(n)]


def test_the_real_binding_fits_the_adapter():
    pynvml = pytest.importorskip("pynvml")  # nvidia-ml-py, the agent extra
    assert check_binding(pynvml) == []


def test_a_binding_that_lacks_a_function_is_refused_at_start_up():
    class Old(FakeNvml):
        nvmlDeviceGetTotalEnergyConsumption = None  # before Volta's counter reached the binding

    assert check_binding(Old()) == ["nvmlDeviceGetTotalEnergyConsumption"]
    assert check_binding(FakeNvml()) == []
    assert set(FUNCTIONS) | set(CONSTANTS) <= set(dir(FakeNvml))
    with pytest.raises(SourceUnavailable, match="lacks nvmlDeviceGetTotalEnergyConsumption"):
        source(Old(cards()))


def test_nvml_that_cannot_start_is_one_clear_error():
    with pytest.raises(SourceUnavailable, match="NVML cannot start"):
        source(FakeNvml(cards(), init_fails=True))


def test_every_card_is_sampled_on_the_next_wall_clock_second():
    clock = FakeClock(T0)
    nvml_source, _ = source(FakeNvml(cards()), clock)
    tick = nvml_source.next_tick(None)
    assert tick.second == 1772323201 and clock.now == 1772323201.0  # slept 0.75 s to the second
    assert [s.gpu_uuid for s in tick.samples] == ["GPU-0", "GPU-1", "GPU-2"]
    first = tick.samples[0]
    assert (first.gpu_model, first.util_pct, first.mem_used_mib, first.power_mw) == ("A800-80G", 50, 10240, 400_000)
    assert (first.energy_mj, first.energy_epoch) == (1_000_000, "boot-1/550.54.15")
    clock.now += 0.3  # the agent spooled the tick
    assert nvml_source.next_tick(tick.second).second == 1772323202


def test_an_nvml_error_on_one_card_skips_that_card_only():
    fleet = cards()
    fleet[1].fail = NVML_ERROR_UNKNOWN
    nvml_source, faults = source(FakeNvml(fleet))
    fleet[1].fail = NVML_ERROR_UNKNOWN  # opened at start, failing since
    tick = nvml_source.next_tick(None)
    assert [s.gpu_uuid for s in tick.samples] == ["GPU-0", "GPU-2"]
    assert faults.counts == {"nvml": 1}


def test_a_card_that_disappears_is_a_fault_and_is_found_again():
    fleet = cards()
    nvml = FakeNvml(fleet)
    clock = FakeClock(T0)
    nvml_source, faults = source(nvml, clock, rescan_s=1000)
    fleet[2].fail = NVML_ERROR_GPU_IS_LOST
    tick = nvml_source.next_tick(None)
    assert [s.gpu_uuid for s in tick.samples] == ["GPU-0", "GPU-1"]
    assert faults.counts == {"card_lost": 1}
    nvml.cards = fleet[:2]  # gone from the bus
    tick = nvml_source.next_tick(tick.second)  # a card was lost: rescanned at once
    assert [s.gpu_uuid for s in tick.samples] == ["GPU-0", "GPU-1"] and faults.counts == {"card_lost": 1}
    fleet[2].fail = None
    nvml.cards = fleet  # back after a reset
    clock.now += 1000  # the next rescan
    tick = nvml_source.next_tick(tick.second)
    assert [s.gpu_uuid for s in tick.samples] == ["GPU-0", "GPU-1", "GPU-2"]


def test_a_counter_that_falls_starts_a_new_generation_of_its_epoch_kept_across_restarts():
    fleet = cards(2)
    clock = FakeClock(T0)
    nvml_source, faults = source(FakeNvml(fleet), clock)
    tick = nvml_source.next_tick(None)
    assert {s.energy_epoch for s in tick.samples} == {"boot-1/550.54.15"}
    fleet[0].energy_mj = 500  # the driver reloaded: the counter starts again
    fleet[1].energy_mj += 400_000
    tick = nvml_source.next_tick(tick.second)
    assert [s.energy_epoch for s in tick.samples] == ["boot-1/550.54.15#1", "boot-1/550.54.15"]
    assert faults.counts == {"counter_reset": 1}
    # a restart resumes the generation from the state the agent spooled
    again, _ = source(FakeNvml(fleet), FakeClock(clock.now), state=nvml_source.state())
    fleet[0].energy_mj = 600
    assert again.next_tick(tick.second).samples[0].energy_epoch == "boot-1/550.54.15#1"
    # a new boot or driver is a new epoch of its own, from generation 0
    upgraded, _ = source(FakeNvml(fleet, driver="560.28.03"), FakeClock(clock.now), state=nvml_source.state())
    assert upgraded.next_tick(tick.second).samples[0].energy_epoch == "boot-1/560.28.03"


def test_metrics_a_card_does_not_support_are_not_reported():
    fleet = [FakeCard("GPU-old", power_mw=300_000, energy_mj=None), FakeCard("GPU-x", power_mw=None)]
    nvml_source, faults = source(FakeNvml(fleet))
    old, other = nvml_source.next_tick(None).samples
    assert (old.power_mw, old.energy_mj, old.energy_epoch) == (300_000, None, None)
    assert other.power_mw is None
    assert faults.counts == {}  # not supported is not a fault of the source; the agent counts what it cannot send


def test_names_map_to_catalog_ids_and_an_unknown_one_is_kept():
    fleet = [FakeCard("a", "NVIDIA GeForce RTX 4090"), FakeCard("b", "NVIDIA H800"),
             FakeCard("c", "NVIDIA A800 80GB PCIe"), FakeCard("d", "NVIDIA A800-SXM4-40GB"),
             FakeCard("e", "Tesla V100-SXM2-16GB")]
    nvml_source, _ = source(FakeNvml(fleet))
    models = [s.gpu_model for s in nvml_source.next_tick(None).samples]
    assert models == ["RTX4090", "H800-80G", "A800-80G", "NVIDIA A800-SXM4-40GB", "Tesla V100-SXM2-16GB"]
    assert ModelMap({"Tesla V100-SXM2-16GB": "V100"}).catalog_id("Tesla V100-SXM2-16GB") == "V100"


def test_a_clock_that_steps_back_is_waited_out_and_no_second_is_sampled_twice():
    clock = FakeClock(T0)
    nvml_source, faults = source(FakeNvml(cards(1)), clock)
    tick = nvml_source.next_tick(None)
    assert tick.second == 1772323201
    clock.now = 1772323201.5 - 120  # NTP steps the clock two minutes back
    tick2 = nvml_source.next_tick(tick.second)
    assert tick2.second == 1772323202  # waited until the clock passed the last second sampled
    assert faults.counts == {"clock_back": 120}  # one a second waited (the log line: once a minute)
    assert max(clock.slept) <= 1.0  # in steps of a second at most, so that a stop is never held up


def test_the_real_nvml_when_this_machine_has_cards():
    """The device check: on a machine with NVIDIA cards, the real binding through the adapter."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVML here ({exc})")
    faults = Faults(AgentMetrics())
    nvml_source = NvmlSource(models=ModelMap(), faults=faults)
    nvml_source.start({})
    try:
        first = nvml_source.next_tick(None)
        second = nvml_source.next_tick(first.second)
    finally:
        nvml_source.close()
    assert second.second == first.second + 1 and first.samples, faults.counts
    for before, after in zip(first.samples, second.samples):
        assert isinstance(after.power_mw, int) and 0 <= after.power_mw <= 5_000_000
        if after.energy_mj is not None:
            assert after.energy_epoch and after.energy_mj >= before.energy_mj
            assert after.energy_mj - before.energy_mj <= 5_000_000 * 2  # at most 5,000 W over at most 2 s
