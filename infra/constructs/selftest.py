"""The FIS role and experiment template `respot selftest` starts after a deploy.

The template (`respot.selftest.experiment`, the same definition the local runtime creates in
its emulator) sends `aws:ec2:send-spot-instance-interruptions` with a two-minute
`durationBeforeInterruption` to the running spot instances that carry both the self-test
job's tag and this deployment's managed tag. Its role may interrupt only those instances
(tag conditions) and describe instances, which FIS needs to resolve the target. Nothing
starts the experiment but `respot selftest`, run by the platform team under the managed policy
`SelftestPolicy` (output `SelftestPolicyArn`; attach it with the researcher policy): start this
template, tag the experiment (FIS authorizes the tags of StartExperiment as fis:TagResource),
read and stop experiments, and create FIS's service-linked role, which FIS makes on an
account's first experiment ("Start an experiment from a template", FIS User Guide).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Aws, CfnOutput, Stack
from aws_cdk import aws_fis as fis
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.nag import suppress
from respot.selftest.experiment import experiment_template, target_tags


class SelftestExperiment(Construct):
    """FIS role (least privilege) and the self-test's experiment template."""

    def __init__(self, scope: Construct, construct_id: str, *, deployment_name: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            # Only FIS, and only on behalf of this account (confused-deputy guard).
            assumed_by=iam.ServicePrincipal(
                "fis.amazonaws.com",
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            ),
            description="respot selftest: FIS interrupts the selftest job's spot instance",
        )
        instances = stack.format_arn(
            service="ec2",
            resource="instance",
            resource_name="*",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        policy = iam.Policy(
            self,
            "Policy",
            roles=[self.role],
            statements=[
                iam.PolicyStatement(
                    sid="InterruptSelftestInstances",
                    actions=["ec2:SendSpotInstanceInterruptions"],
                    resources=[instances],
                    conditions={
                        "StringEquals": {
                            f"aws:ResourceTag/{key}": value
                            for key, value in target_tags(deployment_name).items()
                        }
                    },
                ),
                iam.PolicyStatement(
                    sid="ResolveTargets",
                    actions=["ec2:DescribeInstances"],
                    resources=["*"],
                ),
            ],
        )
        suppress(
            policy,
            "IAM5",
            "FIS resolves the experiment's target by tags, so the instance is not known in "
            "advance: SendSpotInstanceInterruptions is allowed on any instance of this "
            "account/region only when it carries the selftest tag and this deployment's "
            "managed tag; DescribeInstances has no resource-level permissions (Resource '*').",
            applies_to=[
                r"^Resource::arn:<AWS::Partition>:ec2:<AWS::Region>:<AWS::AccountId>:"
                r"instance/\*$",
                r"^Resource::\*$",
            ],
        )
        d = experiment_template(self.role.role_arn, deployment_name)
        T = fis.CfnExperimentTemplate  # noqa: N806 - the property classes live on it
        self.template = T(
            self,
            "Template",
            description=d["description"],
            role_arn=d["roleArn"],
            stop_conditions=[
                T.ExperimentTemplateStopConditionProperty(**c) for c in d["stopConditions"]
            ],
            targets={
                name: T.ExperimentTemplateTargetProperty(
                    resource_type=t["resourceType"],
                    resource_tags=t["resourceTags"],
                    filters=[T.ExperimentTemplateTargetFilterProperty(**f) for f in t["filters"]],
                    selection_mode=t["selectionMode"],
                )
                for name, t in d["targets"].items()
            },
            actions={
                name: T.ExperimentTemplateActionProperty(
                    action_id=a["actionId"],
                    description=a["description"],
                    parameters=a["parameters"],
                    targets=a["targets"],
                )
                for name, a in d["actions"].items()
            },
            tags=d["tags"],
        )
        self.template.node.add_dependency(policy)  # the role can act before FIS may start it
        self.template_id: str = self.template.attr_id
        self.operator_policy = _operator_policy(self, stack, self.template_id)
        CfnOutput(
            self,
            "SelftestPolicyArn",
            key="SelftestPolicyArn",
            value=self.operator_policy.managed_policy_arn,
        )


FIS_SERVICE_LINKED_ROLE = "AWSServiceRoleForFIS"


def _operator_policy(scope: Construct, stack: Stack, template_id: str) -> iam.ManagedPolicy:
    """What `respot selftest` calls on FIS (respot.selftest.run), and nothing else of FIS."""

    def fis_arn(kind: str, name: str) -> str:
        return stack.format_arn(
            service="fis",
            resource=kind,
            resource_name=name,
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )

    experiments = fis_arn("experiment", "*")
    policy = iam.ManagedPolicy(
        scope,
        "OperatorPolicy",
        description="respot selftest: start the self-test's FIS experiment, watch and stop it",
        statements=[
            iam.PolicyStatement(
                sid="StartTheSelftestExperiment",
                actions=["fis:StartExperiment"],
                resources=[fis_arn("experiment-template", template_id), experiments],
            ),
            iam.PolicyStatement(
                # StartExperiment with tags (the self-test tags its experiment with the job id).
                sid="TagSelftestExperiments",
                actions=["fis:TagResource"],
                resources=[experiments],
            ),
            iam.PolicyStatement(
                sid="WatchAndStopExperiments",
                actions=["fis:GetExperiment", "fis:StopExperiment"],
                resources=[experiments],
            ),
            iam.PolicyStatement(
                # FIS creates its service-linked role on the account's first experiment.
                sid="CreateFisServiceLinkedRole",
                actions=["iam:CreateServiceLinkedRole"],
                resources=[
                    f"arn:{Aws.PARTITION}:iam::{Aws.ACCOUNT_ID}:role/aws-service-role/"
                    f"fis.amazonaws.com/{FIS_SERVICE_LINKED_ROLE}"
                ],
                conditions={"StringEquals": {"iam:AWSServiceName": "fis.amazonaws.com"}},
            ),
        ],
    )
    suppress(
        policy,
        "IAM5",
        "An experiment's id exists only once StartExperiment runs, so the self-test's calls "
        "name experiment/* of this account and region (started only from this stack's "
        "template, the resource StartExperiment also needs).",
        applies_to=[
            r"^Resource::arn:<AWS::Partition>:fis:<AWS::Region>:<AWS::AccountId>:experiment/\*$"
        ],
    )
    return policy
