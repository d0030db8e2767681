"""The self-test's FIS role and experiment template, alone and in the respot stack."""

from __future__ import annotations

import json

import pytest
from aws_cdk import assertions

from infra.constructs import SelftestExperiment
from respot.selftest.experiment import ACTION_ID, DURATION_BEFORE_INTERRUPTION, SELFTEST_TAG


@pytest.fixture(scope="module")
def selftest(new_stack):
    stack = new_stack("Respot-test")
    SelftestExperiment(stack, "Selftest", deployment_name=stack.stack_name)
    return assertions.Template.from_stack(stack)


def test_the_template_interrupts_running_spot_instances_of_the_selftest_job(selftest):
    (template,) = selftest.find_resources("AWS::FIS::ExperimentTemplate").values()
    props = template["Properties"]
    (action,) = props["Actions"].values()
    assert action["ActionId"] == ACTION_ID == "aws:ec2:send-spot-instance-interruptions"
    assert action["Parameters"] == {"durationBeforeInterruption": DURATION_BEFORE_INTERRUPTION}
    assert DURATION_BEFORE_INTERRUPTION == "PT2M"
    (target_name,) = action["Targets"].values()
    target = props["Targets"][target_name]
    assert target["ResourceType"] == "aws:ec2:spot-instance"
    assert target["ResourceTags"] == {SELFTEST_TAG: "true", "respot:managed": "Respot-test"}
    assert target["Filters"] == [{"Path": "State.Name", "Values": ["running"]}]
    assert target["SelectionMode"] == "ALL"
    assert props["StopConditions"] == [{"Source": "none"}]
    assert "Fn::GetAtt" in props["RoleArn"]


def test_only_fis_of_this_account_assumes_the_role(selftest):
    (role,) = selftest.find_resources("AWS::IAM::Role").values()
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "fis.amazonaws.com"}
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    }
    assert "ManagedPolicyArns" not in role["Properties"]


def test_the_role_interrupts_only_tagged_instances_and_describes(selftest):
    (policy,) = selftest.find_resources("AWS::IAM::Policy").values()
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"InterruptSelftestInstances", "ResolveTargets"}
    interrupt = statements["InterruptSelftestInstances"]
    assert interrupt["Action"] == "ec2:SendSpotInstanceInterruptions"
    assert interrupt["Condition"] == {
        "StringEquals": {
            f"aws:ResourceTag/{SELFTEST_TAG}": "true",
            "aws:ResourceTag/respot:managed": "Respot-test",
        }
    }
    assert "instance/*" in json.dumps(interrupt["Resource"])
    assert statements["ResolveTargets"]["Action"] == "ec2:DescribeInstances"


def test_the_stack_publishes_the_template_id_for_the_sdk(respot, resources):
    stack, template = respot
    (parameter,) = template.find_resources("AWS::SSM::Parameter").values()
    text = json.dumps(parameter["Properties"]["Value"])
    template_id = stack.get_logical_id(
        stack.selftest.template.node.default_child or stack.selftest.template
    )
    assert '\\"fis_template_id\\":' in text and template_id in text
    assert "FisTemplateId" in template.to_json()["Outputs"]


def _operator_document(selftest) -> dict:
    from infra.local.iam import Resolver

    (policy,) = selftest.find_resources("AWS::IAM::ManagedPolicy").values()
    resolve = Resolver({}, "us-east-1")
    resolve.attrs = _TemplateIds()
    return resolve(policy["Properties"]["PolicyDocument"])


class _TemplateIds(dict):
    def get(self, key, default=None):
        return {"Id": "EXT1a2b3c4d5e6f7", "Ref": key}


def test_the_selftest_policy_starts_tags_watches_and_stops_only_its_experiment(selftest):
    # A fresh account: StartExperiment with tags is authorized as fis:TagResource too, and the
    # first experiment creates FIS's service-linked role (FIS User Guide).
    from infra.iam_eval import allowed

    docs = [_operator_document(selftest)]
    fis = "arn:aws:fis:us-east-1:123456789012"
    template = f"{fis}:experiment-template/EXT1a2b3c4d5e6f7"
    experiment = f"{fis}:experiment/EXPabc"
    assert allowed(docs, "fis:StartExperiment", template)
    assert allowed(docs, "fis:StartExperiment", experiment)
    assert not allowed(docs, "fis:StartExperiment", f"{fis}:experiment-template/EXTother")
    assert allowed(docs, "fis:TagResource", experiment)
    assert not allowed(docs, "fis:TagResource", template)
    assert allowed(docs, "fis:GetExperiment", experiment)
    assert allowed(docs, "fis:StopExperiment", experiment)
    role = "arn:aws:iam::123456789012:role/aws-service-role/fis.amazonaws.com/AWSServiceRoleForFIS"
    fis_service = {"iam:AWSServiceName": "fis.amazonaws.com"}
    assert allowed(docs, "iam:CreateServiceLinkedRole", role, fis_service)
    assert not allowed(
        docs, "iam:CreateServiceLinkedRole", role, {"iam:AWSServiceName": "ec2.amazonaws.com"}
    )
    assert not allowed(docs, "fis:CreateExperimentTemplate", template)
    assert not allowed(docs, "ec2:SendSpotInstanceInterruptions", "*")
    outputs = selftest.to_json()["Outputs"]
    assert "SelftestPolicyArn" in outputs
