"""EC2 `ClientToken` idempotency for the emulator, as AWS documents it.

AWS: a `RunInstances` call that repeats the `ClientToken` of an earlier call returns that
call's reservation and launches nothing. respot relies on it: a launch retried after a crash
between `RunInstances` and the job-record write (the reconcile tick asks again with the same
token) must not start a second GPU instance. moto 5 records the token but launches again, so
the local runtime would hide a lost token. `honour_client_tokens()` patches moto's EC2
backend, in this process (the moto server of the local runtime and of the tests runs
in-process), to answer a repeated token with the first reservation.

Not emulated: AWS also refuses a repeated token whose other parameters differ
(`IdempotentParameterMismatch`); respot derives the token from (job, attempt, launch) and
never reuses one with other parameters.
"""

from __future__ import annotations

import threading
from typing import Any

_LOCK = threading.Lock()
_PATCHED = False
MOTO_DEFAULT_TOKEN = "ABCDE"  # noqa: S105 - moto's stand-in when a call has no ClientToken


def honour_client_tokens() -> None:
    """Make moto's `RunInstances` idempotent per (account, region, ClientToken); once."""
    global _PATCHED  # noqa: PLW0603 - one patch per process
    with _LOCK:
        if _PATCHED:
            return
        from moto.ec2.models.instances import InstanceBackend

        original = InstanceBackend.run_instances
        seen: dict[tuple[str, str, str], Any] = {}

        def run_instances(self: Any, *args: Any, **kwargs: Any) -> Any:
            token = kwargs.get("client_token")
            if not token or token == MOTO_DEFAULT_TOKEN:
                return original(self, *args, **kwargs)
            key = (str(self.account_id), str(self.region_name), str(token))
            with _LOCK:
                if key in seen:
                    return seen[key]
                reservation = original(self, *args, **kwargs)
                seen[key] = reservation
                return reservation

        InstanceBackend.run_instances = run_instances  # type: ignore[method-assign]
        _PATCHED = True
