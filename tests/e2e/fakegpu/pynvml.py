"""A stand-in for `pynvml` (nvidia-ml-py) on the local runtime's instances: one GPU that is
never busy (0% utilization), for the idle-GPU warning's e2e test. The agent imports it by
name (`respot.agent.telemetry`) when this directory is on the instance's PYTHONPATH."""

from __future__ import annotations

from types import SimpleNamespace

NVML_TEMPERATURE_GPU = 0
_GIB = 1024**3


class NVMLError(Exception):
    pass


def nvmlInit() -> None:
    return None


def nvmlShutdown() -> None:
    return None


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    return index


def nvmlDeviceGetName(handle: int) -> bytes:
    return b"Local idle GPU"


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=0, memory=0)


def nvmlDeviceGetMemoryInfo(handle: int) -> SimpleNamespace:
    return SimpleNamespace(used=1 * _GIB, total=24 * _GIB, free=23 * _GIB)


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:
    return 40


def nvmlDeviceGetPowerUsage(handle: int) -> int:
    return 60_000  # milliwatts
