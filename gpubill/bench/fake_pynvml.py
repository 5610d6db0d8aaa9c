"""A stand-in for nvidia-ml-py's `pynvml` on a machine without cards, for `gpubill bench agent`.

The benchmark copies this file as `pynvml.py` into a directory it puts first on the agent's
PYTHONPATH, so that the real command (`gpubill agent --source nvml`) runs unchanged on
GPUBILL_FAKE_NVML_CARDS cards (default 8) that draw 300–400 W and count their energy. It has
exactly the names streams/agent/nvml.py uses (its start-up self-check holds it to them).
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

__version__ = "fake"

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_GPU_IS_LOST = 15

_CARDS = int(os.environ.get("GPUBILL_FAKE_NVML_CARDS", "8"))
_STARTED = time.time()


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    pass


def nvmlSystemGetDriverVersion() -> str:
    return "550.54.15"


def nvmlDeviceGetCount() -> int:
    return _CARDS


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < _CARDS:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return index


def nvmlDeviceGetUUID(handle: int) -> str:
    return f"GPU-bench000-0000-4000-8000-{handle:012d}"


def nvmlDeviceGetName(handle: int) -> str:
    return "NVIDIA A800-SXM4-80GB"


def _power_mw(handle: int) -> int:
    return 300_000 + 12_345 * handle + int(time.time()) % 97 * 1_000


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=(int(time.time()) + handle * 7) % 101, memory=0)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    return SimpleNamespace(used=(20_000 + handle) << 20, total=80 << 30, free=0)


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return _power_mw(handle)


def nvmlDeviceGetTotalEnergyConsumption(handle: int) -> int:
    return int((time.time() - _STARTED) * 350_000) + handle  # ~350 W since "the driver loaded"
