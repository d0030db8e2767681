"""Which jobs are whose workspaces, read from the job table; the owner check.

A workspace's jobs are the command jobs whose command is the supervisor and whose tag
`respot-workspace` names it. Names are per owner: the owner is the job's `submitted_by`, the
identity STS verified when the control plane accepted it, compared with the caller's own
(`sts:GetCallerIdentity`). Only the owner may open, stop or delete a workspace.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from respot.core.job import JobRecord
from respot.core.states import JobState
from respot.exceptions import NotOwnerError, RespotError
from respot.workspace import names


class WorkspaceError(RespotError):
    """A workspace command cannot go on (the message names the fix)."""


def is_workspace(record: JobRecord) -> bool:
    spec = record.submission.spec
    return spec.command == names.COMMAND and names.TAG in spec.tags


def serving_attempt(record: Any) -> Any:
    """The attempt whose JupyterLab a page should reach now: the oldest attempt that has an
    instance and has not ended, else the newest. On the notice the control plane makes the
    replacement current at once, but the noticed attempt serves on through its save window
    (respot.workspace.serve), so the page's autosave must still reach it; the replacement
    restores only once it ended (one trainer per job), and the page follows it then."""
    for attempt in getattr(record, "attempts", None) or []:
        if attempt.instance_id is not None and attempt.end is None:
            return attempt
    return record.current


def name_of(record: JobRecord) -> str:
    return record.submission.spec.tags[names.TAG]


@dataclass(frozen=True)
class Workspace:
    """One workspace of one owner: its jobs, newest first."""

    name: str
    owner: str | None
    jobs: tuple[JobRecord, ...]

    @property
    def newest(self) -> JobRecord:
        return self.jobs[0]

    @property
    def live(self) -> JobRecord | None:
        """The job that runs it now (or is on its way), if any."""
        for job in self.jobs:
            if not job.state.is_terminal():
                return job
        return None

    @property
    def state(self) -> str:
        live = self.live
        if live is None:
            return "stopped"
        if live.state is JobState.RUNNING:
            return "running"
        return "starting"  # requested, held in the queue, placing, replacing


def workspaces(records: Iterable[JobRecord]) -> list[Workspace]:
    """Every workspace in `records`, grouped by (owner, name), newest job first."""
    groups: dict[tuple[str | None, str], list[JobRecord]] = {}
    for record in records:
        if is_workspace(record):
            key = (record.submission.submitted_by, name_of(record))
            groups.setdefault(key, []).append(record)
    return sorted(
        (
            Workspace(name, owner, tuple(sorted(jobs, key=lambda r: r.created_at, reverse=True)))
            for (owner, name), jobs in groups.items()
        ),
        key=lambda w: w.newest.created_at,
        reverse=True,
    )


def mine(records: Iterable[JobRecord], me: str) -> list[Workspace]:
    return [w for w in workspaces(records) if w.owner == me]


def find(records: Iterable[JobRecord], name: str, me: str) -> Workspace | None:
    """`me`'s workspace `name`; NotOwnerError if only another person has one by that name."""
    names.check_name(name)
    everyone = [w for w in workspaces(records) if w.name == name]
    for workspace in everyone:
        if workspace.owner == me:
            return workspace
    if everyone:
        raise NotOwnerError(
            f"workspace {name!r} belongs to {everyone[0].owner or 'an unidentified submitter'}, "
            f"not to you ({me}); only its owner may open, stop or delete it. "
            "`respot notebook ls` lists yours"
        )
    return None


def caller_arn(deployment: Any, session: Any) -> str:
    """Who the laptop's credentials are, as STS says (what the control plane records)."""
    sts = deployment.client("sts", session)
    return str(sts.get_caller_identity()["Arn"])


def live_or_explain(workspace: Workspace | None, name: str) -> JobRecord:
    """The live job of the workspace, or WorkspaceError saying how to start it."""
    if workspace is None:
        raise WorkspaceError(
            f"you have no workspace {name!r}; `respot notebook start {name}` starts one"
        )
    live = workspace.live
    if live is None:
        raise WorkspaceError(
            f"workspace {name!r} is stopped (its last job {workspace.newest.job_id} is "
            f"{workspace.newest.state.value}); `respot notebook start {name}` starts it again "
            "where it was"
        )
    return live
