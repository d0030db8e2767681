"""A job's secrets are named one by one in its credentials' session policy, which STS caps at
2,048 characters: a job naming more than fit is refused before anything is spent, on the
laptop and in the commands function, not at boot after minutes of asking for credentials."""

from __future__ import annotations

from typing import Any

import pytest

from respot import TrainingEnvVar
from respot.client.handle import run
from respot.core.states import JobState
from respot.credentials.policy import secrets_problem
from respot.exceptions import SpecError
from tests.handlers.test_handlers import Env, env, submission

__all__ = ["env"]


def _secrets(n: int) -> dict[str, str]:
    # ARNs of ~90 characters, as a team names them
    return {
        f"SECRET_{i}": (
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:"
            f"respot/jobs/team-ml/service-credential-{i:02d}-AbCdEf"
        )
        for i in range(n)
    }


def test_a_job_with_too_many_secrets_for_its_credentials_is_refused_on_the_laptop(
    tmp_path: Any,
) -> None:
    spec = TrainingEnvVar(name="demo", entry_point="pkg.mod:Session", secrets=_secrets(20))
    with pytest.raises(SpecError, match="secrets: 20 secrets do not fit"):
        run(spec)


def test_a_job_with_too_many_secrets_is_failed_at_submission_and_nothing_launched(
    env: Env,
) -> None:
    sub = submission(secrets=_secrets(20))
    env.control.submit(sub)
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is JobState.FAILED
    assert "secrets: 20 secrets do not fit" in (record.reason or "")
    assert env.instances(sub.job_id) == []


def test_as_many_secrets_as_fit_anywhere_are_accepted(env: Env) -> None:
    fits = max(n for n in range(21) if secrets_problem("job-x", list(_secrets(n).values())) is None)
    assert fits >= 5  # a team's usual handful fits
    sub = submission(secrets=_secrets(fits))
    env.control.submit(sub)
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.state is not JobState.FAILED, record.reason
