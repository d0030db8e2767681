"""What a doctor check finds: a status, what it saw, and how to fix it."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Status(enum.StrEnum):
    """How a finding bears on a deploy."""

    OK = "ok"  # checked and fine
    WARN = "warn"  # a deploy works, but something will bite later (no token, no fallback)
    BLOCKER = "blocker"  # a deploy fails, or no job can run, until this is fixed
    SKIPPED = "skipped"  # not checked here, and why (e.g. not emulated by the local runtime)

    @property
    def blocks(self) -> bool:
        """True if this finding stops a deploy (the command exits non-zero)."""
        return self is Status.BLOCKER


@dataclass(frozen=True)
class Finding:
    """One result of one check."""

    check: str  # e.g. "credentials", "quota G and VT spot"
    status: Status
    summary: str  # what was found, in a sentence
    fix: str = ""  # what to do about it (a command where there is one)

    def to_dict(self) -> dict[str, str]:
        """JSON-friendly form (`respot doctor --json`)."""
        return {
            "check": self.check,
            "status": self.status.value,
            "summary": self.summary,
            "fix": self.fix,
        }


def ok(check: str, summary: str) -> Finding:
    """A check that passed."""
    return Finding(check, Status.OK, summary)


def warn(check: str, summary: str, fix: str) -> Finding:
    """A problem that does not stop a deploy."""
    return Finding(check, Status.WARN, summary, fix)


def blocker(check: str, summary: str, fix: str) -> Finding:
    """A problem that stops a deploy or every job."""
    return Finding(check, Status.BLOCKER, summary, fix)


def skipped(check: str, why: str) -> Finding:
    """A check not run, and why."""
    return Finding(check, Status.SKIPPED, why)
