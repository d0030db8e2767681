"""`respot doctor` on the researcher's machine: the Session Manager plugin that `respot
notebook open` needs on AWS, a warning about notebooks (never a blocker) naming the install
page; skipped on the local runtime and where workspaces are off."""

from __future__ import annotations

from types import SimpleNamespace

from respot.doctor.findings import Status
from respot.doctor.laptop import PLUGIN_CHECK, check_session_manager_plugin
from respot.workspace import ssm


def problem_with(which: object, version: str = "1.2.896.0") -> object:
    return lambda: ssm.plugin_problem(
        which, lambda argv, **kw: SimpleNamespace(stdout=version, returncode=0)
    )


def test_a_missing_plugin_is_a_warning_about_notebooks_with_the_install_link():
    finding = check_session_manager_plugin(problem_with(lambda name: None))
    assert finding.check == PLUGIN_CHECK and finding.status is Status.WARN
    assert not finding.status.blocks
    assert finding.summary.startswith("notebooks only: session-manager-plugin is not installed")
    assert ssm.INSTALL_URL in finding.fix


def test_an_old_plugin_is_a_warning_too():
    finding = check_session_manager_plugin(problem_with(lambda name: "/bin/p", "1.2.694.0"))
    assert finding.status is Status.WARN and "1.2.694.0 is older" in finding.summary


def test_an_installed_plugin_is_ok():
    finding = check_session_manager_plugin(problem_with(lambda name: "/bin/p"))
    assert finding.status is Status.OK


def test_not_checked_where_it_is_not_used():
    asked: list[bool] = []

    def never() -> str | None:
        asked.append(True)
        return "missing"

    assert check_session_manager_plugin(never, local=True).status is Status.SKIPPED
    assert check_session_manager_plugin(never, workspaces=False).status is Status.SKIPPED
    assert asked == []
