"""Interactive workspaces' AWS side (issue 27): how `respot notebook open` reaches JupyterLab.

The laptop forwards a local port to 127.0.0.1:8888 on the instance through Session Manager
port forwarding (the AWS-owned document `AWS-StartPortForwardingSession`): the SSM Agent on
the instance connects out over 443, so no inbound port opens (docs/notebooks-platform.md).

Two grants, on by default (`workspaces`, infra/settings.py):
- the instance role: the SSM Agent's session permissions (`SessionManagerAccess`, the same
  statement as the opt-in `session_manager`), in home and satellite regions;
- the researcher policy (`add_researcher_tunnels`): `ssm:StartSession` with that one document
  only (`ssm:SessionDocumentAccessCheck`, so the default shell document is refused), only on
  this stack's instances (`respot:managed`) whose `respot:owner` tag is the caller's own
  `aws:userid`. The control plane writes that tag at launch from the `UserId` STS answered
  for the submitter's identity proof (respot.core.lifecycle.OWNER_TAG); researchers cannot
  tag instances. `ssm:TerminateSession`/`ssm:ResumeSession` only on sessions whose
  `aws:ssmmessages:session-id` tag (Session Manager puts it on every session) is their own
  `aws:userid` ("Allow a user to end only sessions they started", Method 2, in the Session
  Manager user guide), and `ssmmessages:OpenDataChannel`, which the plugin signs since
  1.2.764.0 with the caller's credentials.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_iam as iam

from infra.nag import suppress
from respot.core.lifecycle import MANAGED_TAG, OWNER_TAG

PORT_FORWARDING_DOCUMENT = "AWS-StartPortForwardingSession"
# IAM's policy variable for the caller: `AROA...:session-name` for a role's session (SSO
# included), `AIDA...` for an IAM user; STS's GetCallerIdentity `UserId` is the same string.
CALLER_ID = "${aws:userid}"
SESSION_ID_TAG = "aws:ssmmessages:session-id"
# Every ssm:StartSession Allow carries it: a request without a document (the shell) fails.
DOCUMENT_CHECK = {"BoolIfExists": {"ssm:SessionDocumentAccessCheck": "true"}}


def add_researcher_tunnels(
    policy: iam.ManagedPolicy, *, deployment_name: str, regions: Sequence[str] = ()
) -> None:
    """The researcher policy's port-forwarding statements (home region plus `regions`)."""
    partition, account = Aws.PARTITION, Aws.ACCOUNT_ID
    where = [Aws.REGION, *regions]
    policy.add_statements(
        iam.PolicyStatement(
            sid="TunnelToOwnInstances",
            actions=["ssm:StartSession"],
            resources=[f"arn:{partition}:ec2:{r}:{account}:instance/*" for r in where],
            conditions={
                "StringEquals": {
                    f"ssm:resourceTag/{OWNER_TAG}": CALLER_ID,
                    f"ssm:resourceTag/{MANAGED_TAG}": deployment_name,
                },
                **DOCUMENT_CHECK,
            },
        ),
        iam.PolicyStatement(
            sid="TunnelDocumentOnly",
            actions=["ssm:StartSession"],
            resources=[
                f"arn:{partition}:ssm:{r}::document/{PORT_FORWARDING_DOCUMENT}" for r in where
            ],
            conditions=DOCUMENT_CHECK,
        ),
        iam.PolicyStatement(
            sid="EndOwnTunnels",
            actions=["ssm:TerminateSession", "ssm:ResumeSession"],
            resources=[f"arn:{partition}:ssm:{r}:{account}:session/*" for r in where],
            conditions={"StringEquals": {f"ssm:resourceTag/{SESSION_ID_TAG}": CALLER_ID}},
        ),
        iam.PolicyStatement(
            sid="TunnelDataChannel",
            actions=["ssmmessages:OpenDataChannel"],
            resources=["*"],
        ),
    )
    suppress(
        policy,
        "IAM5",
        "Workspace tunnels: StartSession only on this stack's instances whose respot:owner tag "
        "is the caller's aws:userid, with AWS-StartPortForwardingSession only "
        "(ssm:SessionDocumentAccessCheck); sessions ended or resumed only when their "
        "aws:ssmmessages:session-id is the caller's; ssmmessages has no resource type and the "
        "data channel needs the token StartSession returned for the caller's own session.",
        applies_to=[
            r"^Resource::arn:<AWS::Partition>:ec2:.*:<AWS::AccountId>:instance/\*$",
            r"^Resource::arn:<AWS::Partition>:ssm:.*:<AWS::AccountId>:session/\*$",
            r"^Resource::\*$",
        ],
    )
