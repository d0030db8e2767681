"""Errors respot raises: one base class and narrow subclasses, each named for what went wrong."""

from __future__ import annotations


class RespotError(Exception):
    """Base class of every error respot raises on purpose."""


class SpecError(RespotError, ValueError):
    """A job specification is invalid; the message names each field and how to fix it."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid job specification ({len(problems)} problem(s)):\n{lines}")


class DeploymentNotFoundError(RespotError):
    """No respot deployment could be found for this account, region or environment."""


class JobNotFoundError(RespotError):
    """The job id is not known to this deployment."""


class IllegalTransitionError(RespotError):
    """A state change that the transition table does not allow."""


class ConcurrentUpdateError(RespotError):
    """A compare-and-set write lost to another writer; re-read and decide again."""


class MessageTooLargeError(RespotError):
    """A message would exceed the size the transport accepts (SNS/SQS: 256 KiB)."""


class CheckpointError(RespotError):
    """A checkpoint is missing, partial or does not match its manifest."""


class DuplicateJobError(RespotError):
    """A submission reused the id of a recorded job with other content or another owner."""


class NotOwnerError(RespotError):
    """A researcher asked to change a job that is not theirs (and is not an admin)."""


class JobNotFinishedError(RespotError):
    """The job has not ended, so it has no outputs yet."""


class PullError(RespotError):
    """Downloading a job's results failed, or a file did not match its recorded checksum."""
