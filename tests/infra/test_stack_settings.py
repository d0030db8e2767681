"""Context values -> DeploySettings: typed JSON from cdk.json and strings from `-c`."""

from __future__ import annotations

import pytest

from infra.settings import DEFAULT_INSTANCE_TYPES, DeploySettings, DeploySettingsError


def settings(**context: object) -> DeploySettings:
    return DeploySettings.from_context(context.get)


def test_defaults_need_no_context():
    s = settings()
    assert s.instance_types == DEFAULT_INSTANCE_TYPES
    assert s.vpc_id is None and not s.subnets
    assert s.stack_name == "Respot"
    assert s.deployment_parameter_name == "/respot/deployment"
    assert s.slack_token_parameter_name == "/respot/slack-token"


def test_json_context_from_cdk_json():
    s = settings(
        vpc_id="vpc-0123456789abcdef0",
        subnet_ids={"subnet-0123456789abcdef0": "eu-west-1a"},
        instance_types=["g6.xlarge"],
        allowed_publisher_role_arns=["arn:aws:iam::123456789012:role/researcher"],
        data_bucket_arns=["arn:aws:s3:::datasets/imagenet", "raw-data"],
        on_demand_prices={"g6.xlarge": 0.805},
        root_volume_gb=500,
        stage="prod",
    )
    assert s.subnets == {"subnet-0123456789abcdef0": "eu-west-1a"}
    assert s.instance_types == ("g6.xlarge",)
    assert s.data_bucket_arns == ("arn:aws:s3:::datasets/imagenet", "raw-data")
    assert s.on_demand_prices == {"g6.xlarge": 0.805}
    assert s.stack_name == "Respot-prod"
    assert s.deployment_parameter_name == "/respot/prod/deployment"
    assert s.slack_token_parameter_name == "/respot/prod/slack-token"
    assert settings(slack_token_parameter="/team/slack").slack_token_parameter_name == (
        "/team/slack"
    )


def test_string_context_from_the_command_line():
    # GIVEN values as `cdk deploy -c key=value` passes them: always strings
    s = settings(
        vpc_id="vpc-0123456789abcdef0",
        subnet_ids='{"subnet-0123456789abcdef0": "us-east-1a"}',
        instance_types="g5.xlarge, g4dn.xlarge",
        allowed_publisher_role_arns='["arn:aws:iam::123456789012:role/a"]',
        root_volume_gb="300",
        on_demand_prices='{"g5.xlarge": "1.006"}',
    )
    assert s.instance_types == ("g5.xlarge", "g4dn.xlarge")
    assert s.allowed_publisher_role_arns == ("arn:aws:iam::123456789012:role/a",)
    assert s.root_volume_gb == 300
    assert s.on_demand_prices == {"g5.xlarge": 1.006}


def test_the_queue_setting_reaches_the_functions_as_one_json_value():
    s = settings(queue='{"enabled": true, "queues": {"serial": {"max_running": 1}}}')
    assert s.queue == {"enabled": True, "queues": {"serial": {"max_running": 1}}}


def test_launch_pacing_reaches_the_functions_as_one_json_value():
    s = settings(launch_pacing='{"rate_per_second": 0.5, "burst": 4}')
    assert s.launch_pacing == {"rate_per_second": 0.5, "burst": 4}
    assert settings().launch_pacing == {}  # the defaults (1/s, burst 10: respot.aws.pacing)


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"vpc_id": "vpc-0123456789abcdef0"}, "together"),
        ({"subnet_ids": {"subnet-0123456789abcdef0": "us-east-1a"}}, "together"),
        (
            {"vpc_id": "vpc-0123456789abcdef0", "subnet_ids": ["subnet-0123456789abcdef0"]},
            "availability zone",
        ),
        (
            {"vpc_id": "vpc-0123456789abcdef0", "subnet_ids": "subnet-0123456789abcdef0"},
            "availability zone",
        ),
        ({"instance_types": ["g5.xlarge; rm -rf /"]}, "instance_types"),
        ({"instance_types": []}, "instance_types"),
        ({"ami_id": "ubuntu"}, "ami_id"),
        ({"root_volume_gb": 4}, "root_volume_gb"),
        ({"root_volume_gb": "big"}, "root_volume_gb"),
        ({"allowed_publisher_role_arns": ["researcher"]}, "IAM ARN"),
        ({"data_bucket_arns": ["arn:aws:sqs:us-east-1:1:q"]}, "data_bucket_arns"),
        ({"on_demand_prices": '{"g5.xlarge": -1}'}, "on_demand_prices"),
        ({"on_demand_prices": "{not json"}, "not valid JSON"),
        ({"stage": "has space"}, "stage"),
        ({"deployment_parameter": "no-leading-slash"}, "deployment_parameter"),
        ({"slack_token_parameter": "xoxb-a-token-not-a-name"}, "slack_token_parameter"),
        ({"queue": {"researcher_gpus": -1}}, "queue: researcher_gpus"),
        ({"queue": '{"queues": {"Night Q": {"max_running": 1}}}'}, "queue: queues"),
        ({"queue": {"max_gpus": 4}}, "queue: unknown queue setting"),
        ({"queue": {"preemption": "off"}}, "queue: preemption"),
        ({"launch_pacing": {"rate_per_second": 500}}, "launch_pacing.rate_per_second"),
        ({"launch_pacing": '{"burst": 0}'}, "launch_pacing.burst"),
    ],
)
def test_bad_context_is_refused_with_the_key_named(context, message):
    with pytest.raises(DeploySettingsError, match=message):
        settings(**context)
