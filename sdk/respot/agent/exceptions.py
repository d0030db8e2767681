"""Errors of the on-instance agent."""

from __future__ import annotations

from respot.exceptions import RespotError


class AgentError(RespotError):
    """Base class of the agent's errors."""


class AgentConfigError(AgentError):
    """An agent environment variable is missing or malformed."""


class ImdsError(AgentError):
    """The instance metadata service did not answer, or answered something unusable."""


class SetupError(AgentError):
    """The job could not be prepared on the instance (submission, code or data)."""


class SessionFailedError(AgentError):
    """The training session raised or its process died."""

    def __init__(self, reason: str, *, exit_code: int | None, log_tail: list[str]) -> None:
        self.reason = reason
        self.exit_code = exit_code
        self.log_tail = log_tail
        super().__init__(reason)
