"""The activity switch of a Lambda container (see respot.control.activity).

Built once per container from the environment the stack gives `commands` and `reconcile`;
`install()` hands in one built on other clients (the local runtime, tests). With no switch
configured (an older stack, a unit test) every call is a no-op: the pollers simply stay on.
"""

from __future__ import annotations

from collections.abc import Callable

from lambdas._runtime import control_plane
from respot.control.activity import ActivitySwitch

_factory: Callable[[], ActivitySwitch | None] | None = None
_switch: ActivitySwitch | None = None
_built = False


def install(factory: Callable[[], ActivitySwitch | None] | None) -> None:
    """Use `factory` to build the switch from now on (None: from the environment)."""
    global _factory, _switch, _built
    _factory, _switch, _built = factory, None, False


def switch() -> ActivitySwitch | None:
    """The container's switch, built once (None: none configured)."""
    global _switch, _built  # noqa: PLW0603 - one per container
    if not _built:
        if _factory is not None:
            _switch = _factory()
        else:
            control = control_plane()
            _switch = ActivitySwitch.from_env(
                ddb=control.jobs.client,
                table_name=control.jobs.table_name,
                sqs=control.notifications.client,
            )
        _built = True
    return _switch
