"""Opt-in shell access to respot's instances through AWS Systems Manager Session Manager.

With the `session_manager` setting, the instance role gets what the SSM Agent needs to take
Session Manager sessions, and nothing else of AmazonSSMManagedInstanceCore (no Run Command,
patching, inventory or parameters): `ssm:UpdateInstanceInformation` and the four
`ssmmessages` channel actions, the statement AWS's Session Manager guide gives for an
instance profile ("Step 2: Verify or add instance permissions for Session Manager",
https://docs.aws.amazon.com/systems-manager/latest/userguide/session-manager-getting-started-instance-profile.html;
the same as the managed policy AWSCloud9SSMInstanceProfile). The agent connects out over
HTTPS (the security group's only egress, 443, already allows it): no inbound port opens.
Who may start a session is the platform team's choice (`ssm:StartSession` in their own
policies, docs/deploy.md); the DLAMI ships the SSM Agent.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.nag import suppress

SESSION_MANAGER_ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)


class SessionManagerAccess(Construct):
    """The instance role's Session Manager statement, in a policy of its own."""

    def __init__(self, scope: Construct, construct_id: str, *, role: iam.IRole) -> None:
        super().__init__(scope, construct_id)
        self.policy = iam.Policy(
            self,
            "Policy",
            roles=[role],
            statements=[
                iam.PolicyStatement(
                    sid="TakeSessionManagerSessions",
                    actions=list(SESSION_MANAGER_ACTIONS),
                    resources=["*"],
                )
            ],
        )
        suppress(
            self.policy,
            "IAM5",
            "Session Manager's instance permissions as AWS documents them: the ssmmessages "
            "channel actions have no resource type, and the instance registers itself "
            "(ssm:UpdateInstanceInformation) before it is a managed instance; opt-in "
            "(session_manager), no inbound port.",
            applies_to=[r"^Resource::\*$"],
        )
