"""`--source nvml`: the node's cards through nvidia-ml-py (`import pynvml`), behind one adapter.

`Nvml` is the only code that touches the binding. At start-up `check_binding` verifies
that the module has every function and constant the adapter calls; a binding that does
not fit is a SourceUnavailable naming what is missing (and the metric
gpubill_agent_source_check stays 0), never an AttributeError in the middle of a night.
Tests pass a fake module with the same names (tests/unit/test_agent_nvml.py).

What is read per card and second:

    util_pct      nvmlDeviceGetUtilizationRates(h).gpu        percent, integer
    mem_used_mib  nvmlDeviceGetMemoryInfo(h).used // 2**20      bytes → whole MiB
    power_mw      nvmlDeviceGetPowerUsage(h)                  milliwatts, integer
    energy_mj     nvmlDeviceGetTotalEnergyConsumption(h)      millijoules since the driver loaded (Volta+)

A metric the card does not support (NVML_ERROR_NOT_SUPPORTED) is "not reported"; any
other error is one `nvml` fault and the card is skipped for that second; a lost card
(NVML_ERROR_GPU_IS_LOST and friends) is a `card_lost` fault and leaves the list until the
next rescan finds it again (every `rescan_s`).

The energy epoch: the counter counts from the driver's load, so one counting run is one
boot (the kernel's boot_id) and one driver (its version). A reload of the same driver
within one boot (a GPU reset, `rmmod`/`modprobe`) leaves both alike; the agent sees its
counter fall and starts a new generation for that card (`…#1`, persisted in the spool's
state). A fall the agent cannot see (it was down during a reload and the counter rose
past its last value again) is more than 10 s later and so never counted as a rise
downstream (billing_rules/counters.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from streams.agent.errors import SourceUnavailable
from streams.agent.metrics import Faults
from streams.agent.models import ModelMap
from streams.agent.readings import CardSample
from streams.agent.sources import Tick

# Everything the adapter uses of the binding; check_binding holds the module to it.
FUNCTIONS = (
    "nvmlInit", "nvmlShutdown", "nvmlSystemGetDriverVersion", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption",
)
CONSTANTS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_NOT_FOUND", "NVML_ERROR_UNINITIALIZED")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class NvmlCallFailed(Exception):
    """One NVML call failed: `code` is NVML's error code, `call` the function."""

    def __init__(self, call: str, code: int | None, text: str) -> None:
        super().__init__(f"{call}: {text}")
        self.call, self.code = call, code


def check_binding(module: Any) -> list[str]:
    """The names the adapter needs that `module` lacks (empty: it fits)."""
    missing = [name for name in FUNCTIONS if not callable(getattr(module, name, None))]
    missing += [name for name in CONSTANTS if not isinstance(getattr(module, name, None), int)]
    if not (isinstance(getattr(module, "NVMLError", None), type) and issubclass(module.NVMLError, Exception)):
        missing.append("NVMLError")
    return missing


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)  # old bindings: bytes


class Nvml:
    """The one adapter to the binding: plain values out, NvmlCallFailed for any NVML error."""

    def __init__(self, module: Any) -> None:
        missing = check_binding(module)
        if missing:
            version = getattr(module, "__version__", "unknown version")
            raise SourceUnavailable(f"the NVML binding ({getattr(module, '__name__', module)}, {version}) lacks "
                                    f"{', '.join(missing)}: install the version pinned by gpubill[agent]")
        self.m = module
        self.not_supported = module.NVML_ERROR_NOT_SUPPORTED
        self.lost_codes = {module.NVML_ERROR_GPU_IS_LOST, module.NVML_ERROR_NOT_FOUND}

    def _call(self, name: str, *args: Any) -> Any:
        try:
            return getattr(self.m, name)(*args)
        except self.m.NVMLError as exc:
            raise NvmlCallFailed(name, getattr(exc, "value", None), str(exc)) from exc

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        self._call("nvmlShutdown")

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def handle(self, index: int) -> Any:
        return self._call("nvmlDeviceGetHandleByIndex", index)

    def uuid(self, handle: Any) -> str:
        return _text(self._call("nvmlDeviceGetUUID", handle))

    def name(self, handle: Any) -> str:
        return _text(self._call("nvmlDeviceGetName", handle))

    def util_pct(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetUtilizationRates", handle).gpu)

    def mem_used_mib(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetMemoryInfo", handle).used) // (1 << 20)

    def power_mw(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", handle))

    def energy_mj(self, handle: Any) -> int:
        return int(self._call("nvmlDeviceGetTotalEnergyConsumption", handle))


def read_boot_id(path: Path = BOOT_ID) -> str:
    """The kernel's id of this boot ("unknown-boot" where there is none, e.g. not Linux)."""
    try:
        return path.read_text().strip() or "unknown-boot"
    except OSError:
        return "unknown-boot"


class NvmlSource:
    """The node's cards, sampled on each wall-clock second."""

    name = "nvml"

    def __init__(self, *, models: ModelMap, faults: Faults, module: Any = None,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 boot_id: Callable[[], str] = read_boot_id, rescan_s: float = 30.0) -> None:
        self.models = models
        self.faults = faults
        self.module = module
        self.clock = clock
        self.sleep = sleep
        self.boot_id = boot_id
        self.rescan_s = rescan_s
        self.nvml: Nvml | None = None
        self.cards: dict[str, tuple[Any, str]] = {}  # uuid → (handle, model: catalog id or the card's name)
        self._epoch_base = ""
        self._counters: dict[str, list[Any]] = {}  # uuid → [epoch base, generation, last energy_mj]
        self._next_scan = 0.0
        self._lost_since_scan = False

    # ---------------------------------------------------------------- start-up

    def start(self, state: dict[str, Any]) -> None:
        """Load the binding, check that it fits, initialise NVML and find the cards;
        SourceUnavailable when any of that fails."""
        module = self.module
        if module is None:
            try:
                import pynvml as module  # nvidia-ml-py
            except ImportError:
                raise SourceUnavailable("--source nvml needs nvidia-ml-py: pip install 'gpubill[agent]'") from None
        self.nvml = Nvml(module)
        try:
            self.nvml.init()
            driver = self.nvml.driver_version()
        except NvmlCallFailed as exc:
            raise SourceUnavailable(f"NVML cannot start ({exc}): is the NVIDIA driver loaded and the device "
                                    "visible to this process (DaemonSet: the NVIDIA runtime class)?") from None
        self._epoch_base = f"{self.boot_id()}/{driver}"
        self._counters = {uuid: list(entry) for uuid, entry in state.get("counters", {}).items()
                          if isinstance(entry, list) and len(entry) == 3}
        self._scan()

    def state(self) -> dict[str, Any]:
        return {"counters": {uuid: list(entry) for uuid, entry in self._counters.items()}}

    def _scan(self) -> None:
        """(Re)discover the cards; a card found again keeps its counter generation."""
        nvml = self.nvml
        self._next_scan = self.clock() + self.rescan_s
        self._lost_since_scan = False
        try:
            count = nvml.count()
        except NvmlCallFailed as exc:
            self.faults.report("nvml", f"NVML cannot count the cards ({exc}); keeping the ones known",
                               key="count")
            return
        found: dict[str, tuple[Any, str]] = {}
        for index in range(count):
            try:
                handle = nvml.handle(index)
                uuid = nvml.uuid(handle)
                name = nvml.name(handle)
            except NvmlCallFailed as exc:
                self.faults.report("nvml", f"NVML card {index} cannot be opened ({exc})", key=f"open-{index}")
                continue
            # A name no catalog id names goes out as it is (the agent counts it: `unknown_model`).
            found[uuid] = (handle, self.models.catalog_id(name) or name)
        self.cards = found

    # ---------------------------------------------------------------- sampling

    def due(self) -> bool:
        return False  # the next second is always ahead

    def next_tick(self, after: int | None) -> Tick:
        """Sleep to the start of the next wall-clock second after `after` (the first run:
        the next second) and sample every card at it. A clock that steps back is waited
        out: no second ≤ `after` is ever sampled again (one `clock_back` fault)."""
        now = self.clock()
        target = int(now // 1) + 1 if after is None else after + 1
        while now < target:
            if after is not None and now < after:
                # Counted each second waited, logged once a minute: a clock stepped far back is loud.
                self.faults.report("clock_back", f"the clock stepped back to {now:.3f}, before the last second "
                                   f"sampled ({after}): sampling resumes at {after + 1}", key="clock")
            self.sleep(min(1.0, target - now))
            now = self.clock()
        second = int(now // 1)
        if self._lost_since_scan or now >= self._next_scan:
            self._scan()
        samples = []
        for uuid, (handle, model) in list(self.cards.items()):
            sample = self._sample(uuid, handle, model)
            if sample is not None:
                samples.append(sample)
        return Tick(second, tuple(samples))

    def _read(self, call: Callable[[Any], Any], handle: Any) -> Any:
        """One metric of one card; None when the card does not support it. NvmlCallFailed
        for any other error (the caller skips the card for this second)."""
        try:
            return call(handle)
        except NvmlCallFailed as exc:
            if exc.code == self.nvml.not_supported:
                return None
            raise

    def _sample(self, uuid: str, handle: Any, model: str) -> CardSample | None:
        nvml = self.nvml
        try:
            util = self._read(nvml.util_pct, handle)
            mem = self._read(nvml.mem_used_mib, handle)
            power = self._read(nvml.power_mw, handle)
            energy = self._read(nvml.energy_mj, handle)
        except NvmlCallFailed as exc:
            if exc.code in self.nvml.lost_codes:
                self.cards.pop(uuid, None)
                self._lost_since_scan = True
                self.faults.report("card_lost", f"card {uuid} is lost ({exc}): it is looked for again at each "
                                   "rescan", key=uuid)
            else:
                self.faults.report("nvml", f"card {uuid}: {exc}; skipped this second", key=uuid)
            return None
        epoch = self._epoch(uuid, energy) if energy is not None else None
        return CardSample(uuid, model, util, mem, power, energy if epoch else None, epoch)

    def _epoch(self, uuid: str, energy_mj: int) -> str:
        """The epoch of this card's counter now: boot and driver, and a generation that
        goes up each time the agent sees the counter fall within them."""
        entry = self._counters.get(uuid)
        if entry is None or entry[0] != self._epoch_base:
            entry = [self._epoch_base, 0, energy_mj]
        elif energy_mj < entry[2]:
            self.faults.report("counter_reset", f"card {uuid}: the energy counter fell ({energy_mj} mJ < "
                               f"{entry[2]} mJ): a new epoch, generation {entry[1] + 1}", key=uuid)
            entry = [self._epoch_base, entry[1] + 1, energy_mj]
        else:
            entry = [self._epoch_base, entry[1], energy_mj]
        self._counters[uuid] = entry
        return self._epoch_base if entry[1] == 0 else f"{self._epoch_base}#{entry[1]}"

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.shutdown()
            except NvmlCallFailed:
                pass
