"""The workspace token's object under the synthesized policies (infra.iam_eval, conditions
evaluated): its owner uploads it create-only, no researcher reads it (the owner keeps a copy
on the laptop), the job's own credentials read it, another job's do not."""

from __future__ import annotations

from infra.iam_eval import allowed
from respot.credentials.policy import session_policy
from respot.storage import layout
from tests.infra.test_iam_policies import arns, policies, template

__all__ = ["arns", "policies", "template"]  # the fixtures, imported for pytest


def test_only_the_jobs_own_credentials_read_the_workspace_token(policies, arns) -> None:
    bucket = arns["bucket"]
    token = f"{bucket}/{layout.workspace_token_key('j-1')}"
    researcher, job = policies["researcher"], policies["job"]
    create_only = {"s3:if-none-match": "*"}
    assert allowed(researcher, "s3:PutObject", token, create_only)  # `respot notebook start`
    assert not allowed(researcher, "s3:PutObject", token)  # never replaced
    assert not allowed(researcher, "s3:GetObject", token)  # no researcher reads it
    assert allowed(researcher, "s3:GetObject", f"{bucket}/jobs/j-1/code/{'ab' * 32}.zip")
    name = bucket.removeprefix("arn:aws:s3:::")
    own, other = session_policy(name, "j-1"), session_policy(name, "j-2")

    def can(session: dict[str, object], action: str) -> bool:  # role AND session policy
        return allowed(job, action, token) and allowed([session], action, token)

    assert can(own, "s3:GetObject")
    assert not can(other, "s3:GetObject")
    assert not can(own, "s3:PutObject")  # the job cannot replace it either
