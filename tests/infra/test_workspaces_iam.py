"""Workspaces' tunnels (issue 27), evaluated on the synthesized template with their conditions:
a researcher may open a Session Manager port-forwarding session to their own workspace's
instance and to no one else's, with `AWS-StartPortForwardingSession` and no other document;
the instance role gets the SSM Agent's session permissions; `workspaces=false` takes both away.
"""

from __future__ import annotations

from typing import Any

import pytest

from infra.constructs.session_manager import SESSION_MANAGER_ACTIONS
from infra.iam_eval import allowed
from infra.local.iam import Resolver, principal_policies, synthesized_template
from infra.settings import DeploySettings, DeploySettingsError
from tests.infra.test_iam_policies import ACCOUNT, REGION, _attrs

# What IAM's `${aws:userid}` and STS's `UserId` read for two SSO users of one role.
ALICE = "AROAEXAMPLEROLEID0001:alice@example.com"
BOB = "AROAEXAMPLEROLEID0001:bob@example.com"
INSTANCE = f"arn:aws:ec2:{REGION}:{ACCOUNT}:instance/i-0123456789abcdef0"
SATELLITE_INSTANCE = f"arn:aws:ec2:us-west-2:{ACCOUNT}:instance/i-0fedcba9876543210"


def document(name: str, region: str = REGION) -> str:
    return f"arn:aws:ssm:{region}::document/{name}"


TUNNEL = document("AWS-StartPortForwardingSession")
SESSION = f"arn:aws:ssm:{REGION}:{ACCOUNT}:session/alice-0123456789abcdef0"


def _policies(settings: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    template = synthesized_template(settings)
    resolve = Resolver(_attrs(template), REGION)
    return {p: [resolve(d) for d in docs] for p, docs in principal_policies(template).items()}


@pytest.fixture(scope="module")
def researcher() -> list[dict[str, Any]]:
    return _policies()["researcher"]


def workspace(owner: str | None, *, caller: str = ALICE, stack: str = "Respot") -> dict[str, Any]:
    """The request context of `caller` starting a session on an instance respot launched for
    `owner` (None: an instance with no owner tag) in deployment `stack`."""
    context: dict[str, Any] = {"aws:userid": caller, "ssm:resourceTag/respot:managed": stack}
    if owner is not None:
        context["ssm:resourceTag/respot:owner"] = owner
    return context


def can_tunnel(policy: list[dict[str, Any]], instance: str, context: dict[str, Any]) -> bool:
    """StartSession is authorized on both resources it names: the instance and the document."""
    return allowed(policy, "ssm:StartSession", instance, context) and allowed(
        policy, "ssm:StartSession", TUNNEL, {"aws:userid": context["aws:userid"]}
    )


def test_a_researcher_may_open_a_tunnel_to_their_own_workspace(researcher):
    assert can_tunnel(researcher, INSTANCE, workspace(ALICE))
    assert can_tunnel(researcher, INSTANCE, workspace(BOB, caller=BOB))


def test_not_to_another_researchers_workspace(researcher):
    assert not allowed(researcher, "ssm:StartSession", INSTANCE, workspace(BOB))
    assert not allowed(researcher, "ssm:StartSession", INSTANCE, workspace(ALICE, caller=BOB))
    # nor to an instance with no owner tag, nor to another deployment's instance of theirs
    assert not allowed(researcher, "ssm:StartSession", INSTANCE, workspace(None))
    other_stack = workspace(ALICE, stack="Respot-other")
    assert not allowed(researcher, "ssm:StartSession", INSTANCE, other_stack)
    # a caller whose id merely ends like the owner's is another caller
    assert not allowed(
        researcher, "ssm:StartSession", INSTANCE, workspace(ALICE, caller="x" + ALICE)
    )


def test_only_with_the_port_forwarding_document(researcher):
    mine = {"aws:userid": ALICE}
    assert allowed(researcher, "ssm:StartSession", TUNNEL, mine)
    for other in (
        "SSM-SessionManagerRunShell",  # the shell a session without a document gets
        "AWS-StartInteractiveCommand",
        "AWS-StartSSHSession",
        "AWS-StartPortForwardingSessionToRemoteHost",  # would reach other hosts from it
        "AWS-StartPortForwardingSession-copy",
    ):
        assert not allowed(researcher, "ssm:StartSession", document(other), mine), other
    # another account's document of that name is not AWS's
    own = f"arn:aws:ssm:{REGION}:{ACCOUNT}:document/AWS-StartPortForwardingSession"
    assert not allowed(researcher, "ssm:StartSession", own, mine)
    # the document check is asked of every StartSession Allow: a false one is refused
    unchecked = {"aws:userid": ALICE, "ssm:SessionDocumentAccessCheck": "false"}
    assert not allowed(researcher, "ssm:StartSession", TUNNEL, unchecked)
    assert not allowed(researcher, "ssm:StartSession", INSTANCE, {**workspace(ALICE), **unchecked})


def test_researchers_end_only_their_own_sessions(researcher):
    def end(session_owner: str, caller: str) -> bool:
        context = {
            "aws:userid": caller,
            "ssm:resourceTag/aws:ssmmessages:session-id": session_owner,
        }
        return allowed(researcher, "ssm:TerminateSession", SESSION, context)

    assert end(ALICE, ALICE)
    assert not end(BOB, ALICE)
    assert not allowed(researcher, "ssm:TerminateSession", SESSION, {"aws:userid": ALICE})
    # and nothing else of Session Manager or EC2
    for action in ("ssm:SendCommand", "ssm:StartAutomationExecution", "ec2:CreateTags"):
        assert not allowed(researcher, action, INSTANCE, workspace(ALICE)), action


def test_satellite_regions_too():
    researcher = _policies({"extra_regions": ["us-west-2"]})["researcher"]
    context = workspace(ALICE)
    assert allowed(researcher, "ssm:StartSession", SATELLITE_INSTANCE, context)
    assert allowed(
        researcher, "ssm:StartSession", document("AWS-StartPortForwardingSession", "us-west-2")
    )
    assert not allowed(researcher, "ssm:StartSession", SATELLITE_INSTANCE, workspace(BOB))


def test_the_instance_role_takes_sessions_with_workspaces_and_not_without():
    on, off = _policies(), _policies({"workspaces": False})
    for action in SESSION_MANAGER_ACTIONS:
        assert allowed(on["instance"], action, "*"), action
        assert not allowed(off["instance"], action, "*"), action
    assert not allowed(off["researcher"], "ssm:StartSession", INSTANCE, workspace(ALICE))
    assert not allowed(off["researcher"], "ssm:StartSession", TUNNEL, {"aws:userid": ALICE})
    assert not allowed(off["researcher"], "ssmmessages:OpenDataChannel", "*")


def test_the_setting_reads_true_and_false():
    assert DeploySettings().workspaces  # on by default
    assert not DeploySettings.from_context({"workspaces": "false"}.get).workspaces
    with pytest.raises(DeploySettingsError, match="workspaces 'sometimes': give true or false"):
        DeploySettings.from_context({"workspaces": "sometimes"}.get)
