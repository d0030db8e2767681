"""Time in the local runtime: a scale from simulated to real seconds, and a timer queue."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("respot.local.clock")


@dataclass(frozen=True)
class TimeScale:
    """How many real seconds one simulated second lasts (1/30: a 2-minute notice takes 4 s)."""

    real_per_simulated: float = 1.0

    def real(self, simulated_seconds: float) -> float:
        """Real seconds for a simulated duration."""
        return simulated_seconds * self.real_per_simulated

    def simulated(self, real_seconds: float) -> float:
        """Simulated seconds for a real duration."""
        return real_seconds / self.real_per_simulated


class Timers:
    """Runs callables at given monotonic times on one background thread."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], object]]] = []
        self._counter = itertools.count()
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="local-timers", daemon=True)
        self._thread.start()

    def after(self, delay_seconds: float, action: Callable[[], object]) -> None:
        """Run `action` after `delay_seconds` real seconds."""
        with self._cv:
            heapq.heappush(
                self._heap,
                (time.monotonic() + max(delay_seconds, 0.0), next(self._counter), action),
            )
            self._cv.notify()

    def stop(self) -> None:
        """Drop pending timers and stop the thread."""
        with self._cv:
            self._stopped = True
            self._heap.clear()
            self._cv.notify()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._cv.wait(timeout)
                if self._stopped:
                    return
                _, _, action = heapq.heappop(self._heap)
            try:
                action()
            except Exception:
                log.exception("a local timer action failed")
