"""GPU telemetry on the instance: NVML sampled on an interval, per GPU, for the heartbeats.

A background thread initialises NVML (the `nvidia-ml-py` package, imported as `pynvml`) and
reads, every `every_seconds`, each GPU's utilization, memory used and total, temperature and
power draw. `take()` (the heartbeat) returns per-GPU means since the previous `take()` (the
peak for memory), so a heartbeat a minute apart still says how busy the GPU was over that
minute; `on_sample` gets every raw sample (the agent writes them to TensorBoard).

On a machine without a GPU, without the driver or without the package, the thread logs
"no GPU" once, with NVML's reason, and ends: training goes on and heartbeats carry no
samples. A figure one GPU does not support (power on some boards) is left out (None), and
a read that fails is skipped, never raised into the agent.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from respot.wire.gpu import MAX_GPUS, GpuSample

logger = logging.getLogger(__name__)

DEFAULT_SAMPLE_SECONDS = 10.0
_MIB = 1024 * 1024


@dataclass
class _Window:
    """Sums since the last take(), per GPU."""

    name: str | None = None
    n: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    memory_peak: float | None = None
    memory_total: float | None = None

    def add(self, sample: GpuSample) -> None:
        self.name = sample.name or self.name
        self.n += 1
        for key in ("utilization_pct", "temperature_c", "power_w"):
            value = getattr(sample, key)
            if value is not None:
                self.sums[key] = self.sums.get(key, 0.0) + value
                self.counts[key] = self.counts.get(key, 0) + 1
        if sample.memory_used_mib is not None:
            self.memory_peak = max(self.memory_peak or 0.0, sample.memory_used_mib)
        self.memory_total = sample.memory_total_mib or self.memory_total

    def mean(self, index: int) -> GpuSample:
        def avg(key: str) -> float | None:
            c = self.counts.get(key, 0)
            return round(self.sums[key] / c, 1) if c else None

        return GpuSample(
            index=index,
            name=self.name,
            utilization_pct=avg("utilization_pct"),
            memory_used_mib=self.memory_peak,
            memory_total_mib=self.memory_total,
            temperature_c=avg("temperature_c"),
            power_w=avg("power_w"),
        )


class GpuTelemetry:
    """Samples every GPU NVML sees; `take()` for heartbeats, `on_sample` for each sample."""

    def __init__(
        self,
        *,
        every_seconds: float = DEFAULT_SAMPLE_SECONDS,
        on_sample: Callable[[list[GpuSample]], None] | None = None,
        nvml: Any = None,
    ) -> None:
        self._every = every_seconds
        self._on_sample = on_sample
        self._nvml = nvml  # the pynvml module, or a fake of it in tests
        self._lock = threading.Lock()
        self._windows: dict[int, _Window] = {}
        self._latest: list[GpuSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-telemetry", daemon=True)
        self.available: bool | None = None  # None until NVML was tried
        self.samples = 0

    def start(self) -> GpuTelemetry:
        """Start sampling in the background."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and release NVML."""
        self._stop.set()
        self._thread.join(timeout=5)

    def take(self) -> list[GpuSample] | None:
        """Per-GPU means since the previous take (the latest sample if none since); None
        without a GPU."""
        with self._lock:
            if not self._latest:
                return None
            if not any(w.n for w in self._windows.values()):
                return list(self._latest)
            out = [w.mean(i) for i, w in sorted(self._windows.items()) if w.n]
            self._windows = {}
            return out

    # ---- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        nvml = self._init()
        if nvml is None:
            return
        try:
            while True:
                self.sample_once(nvml)
                if self._stop.wait(self._every):
                    return
        finally:
            with contextlib.suppress(Exception):  # shutting down; nothing to do about it
                nvml.nvmlShutdown()

    def _init(self) -> Any:
        nvml = self._nvml
        try:
            if nvml is None:
                nvml = importlib.import_module("pynvml")
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded...
            self.available = False
            logger.info("no GPU (%s): GPU telemetry off; training goes on", _reason(exc))
            return None
        if count == 0:
            self.available = False
            logger.info("no GPU (NVML sees none): GPU telemetry off; training goes on")
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            return None
        self.available = True
        logger.info("GPU telemetry: %d GPU(s), every %.0fs", count, self._every)
        return nvml

    def sample_once(self, nvml: Any) -> list[GpuSample]:
        """Read every GPU once (also called by tests with a fake NVML)."""
        try:
            count = min(int(nvml.nvmlDeviceGetCount()), MAX_GPUS)
        except Exception as exc:
            logger.debug("NVML device count failed: %s", exc)
            return []
        samples = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                logger.debug("NVML handle of GPU %d failed: %s", index, exc)
                continue
            samples.append(_read(nvml, index, handle))
        with self._lock:
            self._latest = samples
            for s in samples:
                self._windows.setdefault(s.index, _Window()).add(s)
            self.samples += 1
        if self._on_sample is not None and samples:
            try:
                self._on_sample(samples)
            except Exception:
                logger.warning("handling a GPU sample failed", exc_info=True)
        return samples


def _read(nvml: Any, index: int, handle: Any) -> GpuSample:
    """One GPU's figures; any one NVML cannot give is None."""

    def attempt(read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception:
            return None

    name = attempt(lambda: nvml.nvmlDeviceGetName(handle))
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    util = attempt(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    memory = attempt(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    temp = attempt(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    power_mw = attempt(lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    return GpuSample(
        index=index,
        name=str(name)[:64] if name else None,
        utilization_pct=min(max(float(util), 0.0), 100.0) if util is not None else None,
        memory_used_mib=round(memory.used / _MIB, 1) if memory is not None else None,
        memory_total_mib=round(memory.total / _MIB, 1) if memory is not None else None,
        temperature_c=float(temp) if temp is not None else None,
        power_w=round(power_mw / 1000.0, 1) if power_mw is not None else None,
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return "the nvidia-ml-py package is not installed"
    return f"NVML: {exc}" if str(exc) else f"NVML: {type(exc).__name__}"
