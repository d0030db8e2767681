"""Lambda event source mappings of the local runtime: their state, switched like AWS's.

moto can hold event source mappings, but an enabled one makes moto invoke the function itself
(through Docker) on every SendMessage, which this machine cannot do and which would bypass
the dispatcher. So the local runtime keeps its mappings here, behind the two calls of the
Lambda API that respot makes (`update_event_source_mapping`, `get_event_source_mapping`),
and the dispatcher polls a queue only while its mapping is `Enabled`. As on AWS, a switch
passes through `Enabling`/`Disabling` for a moment, during which another update is refused
with `ResourceInUseException`.
"""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

TRANSITION_SECONDS = 0.2  # real; AWS takes seconds to settle a mapping


@dataclass
class _Mapping:
    uuid: str
    queue: str
    function: str
    enabled: bool
    settles_at: float = 0.0


class LocalEventSourceMappings:
    """The mappings of one local deployment, with a boto3-like Lambda client surface."""

    def __init__(self, transition_seconds: float = TRANSITION_SECONDS) -> None:
        self.transition_seconds = transition_seconds
        self._by_uuid: dict[str, _Mapping] = {}
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()  # ("enable"/"disable"/"refused") for tests

    def create(self, queue: str, function: str, *, enabled: bool) -> str:
        """A mapping from `queue` to `function`; returns its UUID."""
        mapping = _Mapping(str(uuidlib.uuid4()), queue, function, enabled)
        with self._lock:
            self._by_uuid[mapping.uuid] = mapping
        return mapping.uuid

    def uuid_of(self, queue: str) -> str | None:
        """The mapping of `queue`, if it has one."""
        with self._lock:
            return next((m.uuid for m in self._by_uuid.values() if m.queue == queue), None)

    def _state(self, m: _Mapping) -> str:
        settling = time.monotonic() < m.settles_at
        if m.enabled:
            return "Enabling" if settling else "Enabled"
        return "Disabling" if settling else "Disabled"

    def polling(self, queue: str) -> bool:
        """True if Lambda would poll `queue` now (a queue without a mapping: always)."""
        with self._lock:
            m = next((m for m in self._by_uuid.values() if m.queue == queue), None)
            return m is None or self._state(m) == "Enabled"

    # ---- the Lambda API ----------------------------------------------------------------------

    def update_event_source_mapping(self, *, UUID: str, Enabled: bool, **_: Any) -> dict[str, Any]:  # noqa: N803
        """Enable or disable a mapping (refused while the last switch settles)."""
        with self._lock:
            m = self._by_uuid.get(UUID)
            if m is None:
                raise _error("ResourceNotFoundException", f"no event source mapping {UUID}")
            if self._state(m) in ("Enabling", "Disabling"):
                self.calls["refused"] += 1
                raise _error(
                    "ResourceInUseException",
                    f"Cannot update the event source mapping {UUID}: it is {self._state(m)}",
                )
            if m.enabled != Enabled:
                m.enabled = Enabled
                m.settles_at = time.monotonic() + self.transition_seconds
            self.calls["enable" if Enabled else "disable"] += 1
            return {"UUID": UUID, "State": self._state(m)}

    def get_event_source_mapping(self, *, UUID: str) -> dict[str, Any]:  # noqa: N803
        """The mapping's state."""
        with self._lock:
            m = self._by_uuid[UUID]
            return {"UUID": UUID, "State": self._state(m), "FunctionArn": m.function}


def _error(code: str, message: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": message}}, "UpdateEventSourceMapping")
