"""Teams from the researcher's identity (issue 26): the IAM principal tag `respot:team` on the
role or user that submitted, read by the commands function (ListRoleTags/ListUserTags on the
moto server), cached, only in this account; the platform team's mapping wins when both exist.
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from typing import Any

import boto3
import pytest

from respot.aws.teamtags import TEAM_TAG, PrincipalTeams, principal_of
from respot.control.queuecommand import QueueSettingsCommand
from respot.core.states import JobState
from respot.queue.model import QueueLimits
from respot.queue.settings import team_of
from tests.control.test_admission import Account
from tests.handlers.test_handlers import Env, env, submission

__all__ = ["env"]

ACCOUNT = "123456789012"  # moto's


class CountingIam:
    """The IAM client, counting the calls that reach it."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.calls: list[str] = []

    def list_role_tags(self, **kw: Any) -> Any:
        self.calls.append(f"role:{kw['RoleName']}")
        return self.client.list_role_tags(**kw)

    def list_user_tags(self, **kw: Any) -> Any:
        self.calls.append(f"user:{kw['UserName']}")
        return self.client.list_user_tags(**kw)


@pytest.fixture
def iam(moto_endpoint: str, aws_credentials: None) -> Any:
    return boto3.client("iam", endpoint_url=moto_endpoint, region_name="us-east-1")


def _role(iam: Any, team: str | None) -> str:
    name = f"researcher-{secrets.token_hex(4)}"
    tags = [{"Key": TEAM_TAG, "Value": team}] if team is not None else []
    iam.create_role(RoleName=name, AssumeRolePolicyDocument="{}", Path="/ml/", Tags=tags)
    return name


def test_the_arns_whose_tags_iam_keeps() -> None:
    assert principal_of(f"arn:aws:sts::{ACCOUNT}:assumed-role/ann-role/ann@corp") == (
        ACCOUNT,
        "role",
        "ann-role",
    )
    assert principal_of(f"arn:aws:iam::{ACCOUNT}:role/ml/ann-role") == (ACCOUNT, "role", "ann-role")
    assert principal_of(f"arn:aws:iam::{ACCOUNT}:user/team/bo") == (ACCOUNT, "user", "bo")
    for other in (f"arn:aws:iam::{ACCOUNT}:root", f"arn:aws:sts::{ACCOUNT}:federated-user/x", ""):
        assert principal_of(other) is None


def test_a_role_s_or_user_s_tag_names_the_team_cached_and_only_in_this_account(iam: Any) -> None:
    vision, untagged = _role(iam, "vision"), _role(iam, None)
    user = f"bo-{secrets.token_hex(4)}"
    iam.create_user(UserName=user, Tags=[{"Key": TEAM_TAG, "Value": "nlp"}])
    odd = _role(iam, "not a team!")
    counting = CountingIam(iam)
    teams = PrincipalTeams(lambda: counting, lambda: ACCOUNT)
    session = f"arn:aws:sts::{ACCOUNT}:assumed-role/{vision}/ann"
    assert teams.team(session) == "vision"
    assert teams.team(f"arn:aws:iam::{ACCOUNT}:user/{user}") == "nlp"
    assert teams.team(f"arn:aws:sts::{ACCOUNT}:assumed-role/{untagged}/cy") is None
    assert teams.team(f"arn:aws:iam::{ACCOUNT}:role/ml/{odd}") is None  # not a team name
    # asked again within the TTL: from the cache, no call to IAM
    calls = len(counting.calls)
    assert teams.team(session) == "vision" and len(counting.calls) == calls
    # a same-named role of another account is never looked up here (IAM would answer for ours)
    assert teams.team(f"arn:aws:sts::210987654321:assumed-role/{vision}/eve") is None
    assert len(counting.calls) == calls


def test_iam_refusing_gives_no_team_and_is_asked_again_next_time(iam: Any) -> None:
    class Refusing:
        calls = 0

        def list_role_tags(self, **kw: Any) -> Any:
            Refusing.calls += 1
            raise RuntimeError("AccessDenied")

    teams = PrincipalTeams(Refusing, lambda: ACCOUNT)
    arn = f"arn:aws:sts::{ACCOUNT}:assumed-role/r/s"
    assert teams.team(arn) is None and teams.team(arn) is None
    assert Refusing.calls == 2  # a failure is not cached


def test_the_mapping_wins_over_the_tag() -> None:
    limits = QueueLimits(teams={"ann": "vision"})
    ann = f"arn:aws:sts::{ACCOUNT}:assumed-role/r/ann"
    assert team_of(ann, limits, tagged="nlp") == "vision"
    assert team_of(f"arn:aws:sts::{ACCOUNT}:assumed-role/r/bo", limits, tagged="nlp") == "nlp"
    assert team_of(f"arn:aws:sts::{ACCOUNT}:assumed-role/r/cy", limits) == "default"


def test_a_submission_records_the_tag_s_team_and_admission_counts_it(env: Env, iam: Any) -> None:
    # GIVEN the queue on, a limit of 0 GPUs for team nlp, and ann's role tagged nlp
    env.control.settings = replace(env.control.settings, admission=True)
    env.control.admission.enabled = True
    env.control.admission.account = Account(env)
    admin = f"arn:aws:iam::{ACCOUNT}:role/platform"
    role = _role(iam, "nlp")
    counting = CountingIam(iam)
    env.control.teams = PrincipalTeams(lambda: counting, lambda: ACCOUNT)
    ann = f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/ann-{role}"

    def settings(**extra: Any) -> None:
        env.control.set_queue_settings(
            QueueSettingsCommand(
                settings={"enabled": True, "team_gpus_by_team": {"nlp": 0}, **extra},
                requested_at=submission().submitted_at,
                requested_by=admin,
            ),
            admins=(admin,),
        )

    settings()
    # WHEN ann submits THEN her job is of team nlp: refused by nlp's limit of 0 GPUs (a job
    # of team default would have been admitted)
    sub = submission(instance_types=["g5.xlarge"]).model_copy(update={"submitted_by": ann})
    env.control.submit(sub)
    record = env.control.jobs.get(sub.job_id)
    assert record is not None and record.team == "nlp"
    assert record.state is JobState.FAILED
    assert record.reason is not None and "limit team_gpus = 0" in record.reason
    # WHEN the platform team maps her to vision THEN the mapping wins: no tag read, admitted
    settings(teams={f"ann-{role}": "vision"})
    calls = len(counting.calls)
    nxt = submission(instance_types=["g5.xlarge"]).model_copy(update={"submitted_by": ann})
    env.control.submit(nxt)
    later = env.control.jobs.get(nxt.job_id)
    assert later is not None and later.team is None and len(counting.calls) == calls
    assert later.state is JobState.REQUESTED
