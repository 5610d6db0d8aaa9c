"""Fakes for the agent's unit tests: an NVML module, a Kafka producer, a clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from kafka.future import Future

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_UNKNOWN = 999
NVML_ERROR_GPU_IS_LOST = 15


class FakeNvmlError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeCard:
    uuid: str
    name: str = "NVIDIA A800-SXM4-80GB"
    util: int = 50
    mem_bytes: int = 10 * (1 << 30)
    power_mw: int | None = 400_000
    energy_mj: int | None = 1_000_000
    fail: int | None = None  # every call on this card raises NVMLError(fail)


@dataclass
class FakeNvml:
    """Module-like: the names streams/agent/nvml.py uses, over a list of FakeCards."""

    cards: list[FakeCard] = field(default_factory=list)
    driver: str = "550.54.15"
    init_fails: bool = False

    NVMLError = FakeNvmlError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_NOT_FOUND = NVML_ERROR_NOT_FOUND
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED

    def _card(self, handle: FakeCard) -> FakeCard:
        if handle.fail is not None:
            raise FakeNvmlError(handle.fail)
        return handle

    def nvmlInit(self):
        if self.init_fails:
            raise FakeNvmlError(NVML_ERROR_UNINITIALIZED)

    def nvmlShutdown(self):
        pass

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlDeviceGetCount(self):
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index):
        return self.cards[index]

    def nvmlDeviceGetUUID(self, handle):
        return self._card(handle).uuid

    def nvmlDeviceGetName(self, handle):
        return self._card(handle).name.encode()  # old bindings return bytes

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu=self._card(handle).util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=self._card(handle).mem_bytes, total=80 << 30, free=0)

    def nvmlDeviceGetPowerUsage(self, handle):
        card = self._card(handle)
        if card.power_mw is None:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return card.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        card = self._card(handle)
        if card.energy_mj is None:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return card.energy_mj


class FakeClock:
    """Wall time that moves only when slept."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class FakeProducer:
    """Records what was sent; `down` makes every send fail (as kafka-python's futures do)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []
        self.down = False
        self.fail_after: int | None = None  # this many sends succeed, then the rest fail

    def send(self, topic: str, value: bytes, key: bytes):
        future = Future()
        if self.down or (self.fail_after is not None and self.fail_after <= 0):
            future.failure(ConnectionError("broker away"))
        else:
            if self.fail_after is not None:
                self.fail_after -= 1
            self.sent.append((topic, key, value))
            future.success(None)
        return future

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass
