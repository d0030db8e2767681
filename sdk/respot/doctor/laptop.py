"""What the researcher's own machine needs: the Session Manager plugin for notebooks.

`respot notebook open` on AWS tunnels to JupyterLab through Session Manager port forwarding,
which the AWS CLI and respot hand to AWS's `session-manager-plugin` binary
(respot.workspace.ssm). Without it every other command works, so a missing or outdated
plugin is a warning about notebooks, never a blocker.
"""

from __future__ import annotations

from collections.abc import Callable

from respot.doctor.findings import Finding, ok, skipped, warn
from respot.workspace import ssm

PLUGIN_CHECK = "session-manager plugin"
LOCAL_PLUGIN = (
    "the local runtime's notebooks use respot's own tunnel on 127.0.0.1, not Session Manager"
)
NO_WORKSPACES = "workspaces are off in this deployment's settings (workspaces: false)"


def check_session_manager_plugin(
    problem: Callable[[], str | None] = ssm.plugin_problem,
    *,
    local: bool = False,
    workspaces: bool = True,
) -> Finding:
    """The plugin `respot notebook open` needs on AWS: a warning naming the install page."""
    if local:
        return skipped(PLUGIN_CHECK, LOCAL_PLUGIN)
    if not workspaces:
        return skipped(PLUGIN_CHECK, NO_WORKSPACES)
    found = problem()
    if found is None:
        return ok(PLUGIN_CHECK, "installed: `respot notebook open` can tunnel to JupyterLab")
    return warn(
        PLUGIN_CHECK,
        f"notebooks only: {found.split('; ')[0]}",
        f"install or update AWS's session-manager-plugin: {ssm.INSTALL_URL}",
    )
