"""The activity switch of a Lambda container (see respot.control.activity).

Built from the environment the stack gives `commands` and `reconcile`, on the control plane's
clients; `install()` hands in one built on other clients (the local runtime, tests). With no
switch configured (an older stack, a unit test) every call is a no-op: the pollers simply
stay on, and the control plane is not even asked for its clients.

A switch built from the environment belongs to the control plane whose clients it holds: when
another control plane is installed (`lambdas._runtime.install`, the local runtime and tests),
the next call builds it again. (Cached once per process before, the switch outlived the
control plane it was built on, so whether a submission tripped over a stand-in control plane
depended on which test had run first in that process.)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from lambdas._runtime import control_plane, logger
from respot.control.activity import ENV_MAPPINGS, ENV_RULE, ActivitySwitch
from respot.control.service import ControlPlane

_factory: Callable[[], ActivitySwitch | None] | None = None
_switch: ActivitySwitch | None = None
_built = False
_built_on: ControlPlane | None = None  # the control plane a switch from the environment uses


def install(factory: Callable[[], ActivitySwitch | None] | None) -> None:
    """Use `factory` to build the switch from now on (None: from the environment)."""
    global _factory, _switch, _built, _built_on, _kept_on_at
    _factory, _switch, _built, _built_on, _kept_on_at = factory, None, False, None, None


def configured() -> bool:
    """True if the stack configured a switch in this function's environment."""
    return bool(os.environ.get(ENV_RULE) or os.environ.get(ENV_MAPPINGS))


# The EC2 handlers check the pollers at most this often per container (a few Lambda API reads).
KEEP_ON_EVERY_SECONDS = 300.0
_kept_on_at: float | None = None


def keep_on(clock: Callable[[], float] = time.monotonic) -> None:
    """An EC2 event of a live job: make sure the pollers really are on (`ensure_on` reads
    their state), at most every `KEEP_ON_EVERY_SECONDS` per container. A deploy that disabled
    the reconcile schedule itself leaves no tick to notice; the EC2 rules stay on. Never
    raises: the event it rides on must not fail for it (the next one tries again)."""
    global _kept_on_at  # noqa: PLW0603 - one per container
    now = clock()
    if _kept_on_at is not None and now - _kept_on_at < KEEP_ON_EVERY_SECONDS:
        return
    try:
        current = switch()
        if current is not None:
            current.ensure_on()
        _kept_on_at = now
    except Exception:
        logger.exception("could not check that the pollers are on; the next event tries again")


def switch() -> ActivitySwitch | None:
    """The container's switch (None: none configured)."""
    global _switch, _built, _built_on  # noqa: PLW0603 - one per container
    if _factory is not None:
        if not _built:
            _switch, _built = _factory(), True
        return _switch
    if not configured():
        return None  # nothing to switch: do not build (or touch) the control plane for it
    control = control_plane()
    if not _built or _built_on is not control:
        _switch = ActivitySwitch.from_env(
            ddb=control.jobs.client,
            table_name=control.jobs.table_name,
            sqs=control.notifications.client,
        )
        _built, _built_on = True, control
    return _switch
