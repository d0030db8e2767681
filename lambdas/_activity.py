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
from collections.abc import Callable

from lambdas._runtime import control_plane
from respot.control.activity import ENV_MAPPINGS, ENV_RULE, ActivitySwitch
from respot.control.service import ControlPlane

_factory: Callable[[], ActivitySwitch | None] | None = None
_switch: ActivitySwitch | None = None
_built = False
_built_on: ControlPlane | None = None  # the control plane a switch from the environment uses


def install(factory: Callable[[], ActivitySwitch | None] | None) -> None:
    """Use `factory` to build the switch from now on (None: from the environment)."""
    global _factory, _switch, _built, _built_on
    _factory, _switch, _built, _built_on = factory, None, False, None


def configured() -> bool:
    """True if the stack configured a switch in this function's environment."""
    return bool(os.environ.get(ENV_RULE) or os.environ.get(ENV_MAPPINGS))


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
