"""The one job-id rule, used everywhere a job id arrives or is turned into a key or a path.

A job id names an S3 prefix (`jobs/<id>/`), a directory on the instance
(`<work_dir>/<id>/<attempt>`), a DynamoDB key, EC2 tag values and a Slack message group.
So it is deliberately plain: 1-100 characters of lowercase ASCII letters, digits and '-',
starting with a letter or digit. No '.', '/', '\\', whitespace, control characters or
upper case, so it can never be '..', an absolute path, or two ids that differ only in case.

`new_job_id` (respot.wire.messages) always produces a valid id. Every entry point checks with
`check_job_id` (or the pydantic type `JobId`): the SDK before anything is uploaded, the
handlers (an invalid id is dead-lettered with the reason, never launched), the agent on
the tags it reads from IMDS, `respot.storage.layout` before it builds a key, and the agent's work
directories before they are created. It imports only `respot.exceptions`, so every
layer can use it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator

from respot.exceptions import RespotError

MAX_JOB_ID_LENGTH = 100
# Where a job id first becomes a key: every object of a job is under jobs/<job-id>/ (the
# storage layout builds on it; `reach` grants reads of earlier jobs' outputs by it).
JOBS_PREFIX = "jobs/"
_JOB_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,99}")


class InvalidJobIdError(RespotError, ValueError):
    """A job id that breaks the rule above; the message says what is wrong and the fix."""


def check_job_id(value: Any) -> str:
    """`value` if it is a valid job id; otherwise `InvalidJobIdError` naming the problem."""
    if not isinstance(value, str):
        raise InvalidJobIdError(f"a job id is text, not {type(value).__name__}")
    if _JOB_ID.fullmatch(value) is None:
        shown = value if len(value) <= 120 else value[:120] + "..."
        raise InvalidJobIdError(
            f"{shown!r} is not a job id: use 1-{MAX_JOB_ID_LENGTH} lowercase letters, digits "
            "and '-', starting with a letter or digit (e.g. 'digits-20261123164200-a1b2c3'); "
            "no spaces, '.', '/' or upper case"
        )
    return value


# A sweep trial's job id: the sweep's id, the trial number and a random token. The token makes
# it unguessable (a researcher who submitted `<sweep>-t000` first would take the id and fail
# the trial); the shape is reserved: the commands function refuses a published job whose id
# has it, so only respot's sweep function submits jobs under such ids.
_TRIAL_SUFFIX = re.compile(r"-t\d{3,}-[0-9a-f]{10}$")
TRIAL_TOKEN_BYTES = 5


def trial_job_id(sweep_id: str, number: int, token: str | None = None) -> str:
    """The job id of trial `number` of sweep `sweep_id`: `<sweep id>-t<number>-<10 hex>`."""
    import secrets

    token = token or secrets.token_hex(TRIAL_TOKEN_BYTES)
    suffix = f"-t{number:03d}-{token}"
    return check_job_id(sweep_id[: MAX_JOB_ID_LENGTH - len(suffix)] + suffix)


def is_trial_job_id(value: str) -> bool:
    """True if `value` has the shape reserved for sweep trials (`trial_job_id`)."""
    return _TRIAL_SUFFIX.search(value) is not None


def is_job_id(value: Any) -> bool:
    """True if `value` is a valid job id."""
    try:
        check_job_id(value)
    except InvalidJobIdError:
        return False
    return True


def _check(value: str) -> str:
    try:
        return check_job_id(value)
    except InvalidJobIdError as exc:
        raise ValueError(str(exc)) from None  # pydantic reports ValueErrors by field


JobId = Annotated[str, AfterValidator(_check)]
"""A `str` field that only accepts valid job ids (for pydantic models)."""
