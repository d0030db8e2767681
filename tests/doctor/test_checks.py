"""Each doctor check against moto server (EC2, IAM, SSM, STS, CloudFormation, Secrets Manager)
and, for Service Quotas, which moto implements for `vpc` only, botocore's Stubber."""

from __future__ import annotations

import contextlib
import secrets
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber

from respot.doctor import Status, Target, blocks, checks, run_checks
from respot.doctor.quotas import quotas_for

REGION = "us-east-1"


@pytest.fixture
def aws(moto_endpoint: str, aws_credentials: None) -> Any:
    """A client factory on the shared moto server."""

    def client(service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=moto_endpoint)

    return client


def vpc_with_subnet(ec2: Any, zone: str = "us-east-1a") -> tuple[str, str, str]:
    """(vpc id, subnet id, route table id): a VPC of our own with one subnet, no way out."""
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24", AvailabilityZone=zone)
    subnet_id = subnet["Subnet"]["SubnetId"]
    table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=table, SubnetId=subnet_id)
    return vpc, subnet_id, table


# ---- credentials ---------------------------------------------------------------------------


def test_credentials_name_the_account_or_block_with_the_fix(aws: Any) -> None:
    finding, account = checks.check_credentials(aws("sts"))
    assert finding.status is Status.OK and account == "123456789012"

    sts = boto3.client("sts", region_name=REGION)
    with Stubber(sts) as stub:
        stub.add_client_error("get_caller_identity", "ExpiredToken", "The token has expired")
        finding, account = checks.check_credentials(sts)
    assert finding.status is Status.BLOCKER and account is None
    assert "ExpiredToken" in finding.summary and "aws sso login" in finding.fix


def test_without_credentials_nothing_else_runs() -> None:
    class NoCredentials:
        def get_caller_identity(self) -> None:
            raise NoCredentialsError()

    def client(service: str) -> Any:
        if service == "sts":
            return NoCredentials()
        raise AssertionError(f"{service} was called without credentials")

    findings = run_checks(Target(region=REGION, instance_types=("g5.xlarge",)), client)
    assert findings[0].status is Status.BLOCKER and blocks(findings)
    assert all(f.status is Status.SKIPPED for f in findings[1:]) and len(findings) == 13


# ---- CDK bootstrap ----------------------------------------------------------------------


def test_bootstrap_missing_old_and_current(aws: Any) -> None:
    qualifier = secrets.token_hex(4)
    ssm, cfn = aws("ssm"), aws("cloudformation")

    def check() -> Any:
        return checks.check_bootstrap(
            ssm, cfn, qualifier=qualifier, account="123456789012", region=REGION
        )

    missing = check()
    assert missing.status is Status.BLOCKER
    assert missing.fix == f"cdk bootstrap aws://123456789012/{REGION}"
    name = f"/cdk-bootstrap/{qualifier}/version"
    ssm.put_parameter(Name=name, Value="5", Type="String")
    old = check()
    assert old.status is Status.BLOCKER and "needs 6" in old.summary
    ssm.put_parameter(Name=name, Value="29", Type="String", Overwrite=True)
    assert check().status is Status.OK


# ---- the respot stack -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected", "fix"),
    [
        ("ROLLBACK_COMPLETE", Status.BLOCKER, "delete-stack --stack-name Respot"),
        ("UPDATE_ROLLBACK_FAILED", Status.BLOCKER, "continue-update-rollback"),
        ("DELETE_FAILED", Status.BLOCKER, "describe-stack-events"),
        ("UPDATE_IN_PROGRESS", Status.WARN, "wait"),
        ("UPDATE_COMPLETE", Status.OK, ""),
    ],
)
def test_a_stack_left_by_a_failed_deploy_blocks_with_the_way_out(
    status: str, expected: Status, fix: str
) -> None:
    cfn = boto3.client("cloudformation", region_name=REGION)
    with Stubber(cfn) as stub:
        stub.add_response(
            "describe_stacks",
            {
                "Stacks": [
                    {
                        "StackName": "Respot",
                        "CreationTime": "2026-11-23T00:00:00Z",
                        "StackStatus": status,
                    }
                ]
            },
            {"StackName": "Respot"},
        )
        finding = checks.check_stack(cfn, stack_name="Respot")
    assert finding.status is expected and fix in finding.fix


def test_a_stack_not_deployed_yet_is_fine(aws: Any) -> None:
    finding = checks.check_stack(aws("cloudformation"), stack_name=f"R-{secrets.token_hex(3)}")
    assert finding.status is Status.OK and "not deployed yet" in finding.summary


# ---- spot service-linked role ----------------------------------------------------------


def test_spot_service_linked_role(aws: Any) -> None:
    iam = aws("iam")
    with contextlib.suppress(iam.exceptions.NoSuchEntityException):
        iam.delete_role(RoleName="AWSServiceRoleForEC2Spot")
    missing = checks.check_spot_role(iam)
    assert missing.status is Status.WARN
    assert "create-service-linked-role --aws-service-name spot.amazonaws.com" in missing.fix
    iam.create_role(
        RoleName="AWSServiceRoleForEC2Spot",
        Path="/aws-service-role/spot.amazonaws.com/",
        AssumeRolePolicyDocument="{}",
    )
    assert checks.check_spot_role(iam).status is Status.OK


# ---- instance types and quotas -----------------------------------------------------------


def test_a_mistyped_instance_type_blocks_and_is_named(aws: Any) -> None:
    findings = checks.check_instance_types(
        aws("ec2"), ("g5.xlarg",), zones=["us-east-1a"], region=REGION
    )
    assert [f.status for f in findings] == [Status.BLOCKER]
    assert "g5.xlarg is not an EC2 instance type" in findings[0].summary


def test_instance_types_offered_in_the_configured_zones(aws: Any) -> None:
    findings = checks.check_instance_types(
        aws("ec2"), ("g5.xlarge", "g4dn.xlarge"), zones=["us-east-1a"], region=REGION
    )
    assert [f.status for f in findings] == [Status.OK, Status.OK]
    nowhere = checks.check_instance_types(
        aws("ec2"), ("g5.xlarge",), zones=["us-east-1z"], region=REGION
    )
    assert [f.status for f in nowhere] == [Status.WARN, Status.BLOCKER]


def stubbed_quotas(values: dict[str, float | None]) -> tuple[Any, Stubber]:
    """A Service Quotas client answering `values` (None: the caller may not read it)."""
    client = boto3.client(
        "service-quotas", region_name=REGION, config=Config(retries={"max_attempts": 0})
    )
    stub = Stubber(client)
    for code, value in values.items():
        params = {"ServiceCode": "ec2", "QuotaCode": code}
        if value is None:
            stub.add_client_error(
                "get_service_quota", "AccessDeniedException", "no", 400, expected_params=params
            )
            continue
        stub.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": value}},
            params,
        )
    stub.activate()
    return client, stub


def test_quota_of_zero_for_g_spot_blocks_with_the_request_that_raises_it(aws: Any) -> None:
    # GIVEN a new account: G and VT spot 0 vCPUs, on-demand 4
    client, stub = stubbed_quotas({"L-3819A6DF": 0.0, "L-DB2E81BA": 4.0})
    # WHEN g5.xlarge (4 vCPUs) and g5.2xlarge (8) are configured
    findings = checks.check_quotas(client, aws("ec2"), ("g5.xlarge", "g5.2xlarge"), region=REGION)
    stub.assert_no_pending_responses()
    spot, on_demand = findings
    # THEN spot blocks, naming the quota and the command; on-demand fits only the smaller one
    assert spot.status is Status.BLOCKER and "L-3819A6DF is 0 vCPUs" in spot.summary
    assert spot.fix == (
        "aws service-quotas request-service-quota-increase --service-code ec2 "
        f"--quota-code L-3819A6DF --desired-value 8 --region {REGION}"
    )
    assert on_demand.status is Status.WARN and "not for g5.2xlarge" in on_demand.summary


def test_enough_quota_and_an_unreadable_quota(aws: Any) -> None:
    client, _stub = stubbed_quotas({"L-3819A6DF": 64.0, "L-DB2E81BA": None})
    spot, on_demand = checks.check_quotas(client, aws("ec2"), ("g4dn.xlarge",), region=REGION)
    assert spot.status is Status.OK and "16 x g4dn.xlarge" in spot.summary
    assert on_demand.status is Status.WARN and "AccessDeniedException" in on_demand.summary


def test_instance_families_map_to_their_quotas() -> None:
    assert quotas_for("g5.xlarge").spot_code == "L-3819A6DF"  # type: ignore[union-attr]
    assert quotas_for("g6e.xlarge").on_demand_code == "L-DB2E81BA"  # type: ignore[union-attr]
    assert quotas_for("p5.48xlarge").spot_code == "L-C4BD4855"  # type: ignore[union-attr]
    assert quotas_for("p4d.24xlarge").spot_code == "L-7212CCBC"  # type: ignore[union-attr]
    assert quotas_for("m5.large").on_demand_code == "L-1216C47A"  # type: ignore[union-attr]
    assert quotas_for("inf2.xlarge").spot_code == "L-B5D1601B"  # type: ignore[union-attr]
    assert quotas_for("trn1.2xlarge").on_demand_code == "L-2C3B7624"  # type: ignore[union-attr]
    assert quotas_for("mac1.metal") is None


# ---- the AMI -------------------------------------------------------------------------------


def test_ami_by_id_and_by_parameter(aws: Any) -> None:
    ec2, ssm = aws("ec2"), aws("ssm")
    good = checks.check_ami(ec2, ssm, ami_id="ami-12c6146b", ami_parameter=None, region=REGION)
    assert good.status is Status.OK
    other_region = checks.check_ami(
        ec2, ssm, ami_id="ami-0123456789abcdef0", ami_parameter=None, region=REGION
    )
    assert other_region.status is Status.BLOCKER and "AMIs are regional" in other_region.fix
    parameter = f"/test/{secrets.token_hex(4)}/ami-id"
    absent = checks.check_ami(ec2, ssm, ami_id=None, ami_parameter=parameter, region=REGION)
    assert absent.status is Status.BLOCKER and parameter in absent.summary
    ssm.put_parameter(Name=parameter, Value="ami-12c6146b", Type="String")
    resolved = checks.check_ami(ec2, ssm, ami_id=None, ami_parameter=parameter, region=REGION)
    assert resolved.status is Status.OK and "-> ami-12c6146b" in resolved.summary


# ---- network -------------------------------------------------------------------------------


def test_private_subnet_needs_a_nat_or_the_endpoints(aws: Any) -> None:
    ec2 = aws("ec2")
    vpc, subnet, table = vpc_with_subnet(ec2)

    def check() -> list[Any]:
        return checks.check_network(ec2, vpc_id=vpc, subnets={subnet: "us-east-1a"}, region=REGION)

    # GIVEN no NAT and no endpoint: every boot would fail
    vpc_ok, private = check()
    assert vpc_ok.status is Status.OK and private.status is Status.BLOCKER
    assert "S3 gateway endpoint" in private.summary and "sqs interface" in private.summary
    # WHEN the S3 gateway and the SQS and Logs interface endpoints exist
    ec2.create_vpc_endpoint(
        VpcId=vpc,
        ServiceName=f"com.amazonaws.{REGION}.s3",
        VpcEndpointType="Gateway",
        RouteTableIds=[table],
    )
    for service in ("sqs", "logs"):
        ec2.create_vpc_endpoint(
            VpcId=vpc,
            ServiceName=f"com.amazonaws.{REGION}.{service}",
            VpcEndpointType="Interface",
            SubnetIds=[subnet],
            PrivateDnsEnabled=True,
        )
    # THEN respot works, with a warning about package indexes
    assert check()[1].status is Status.WARN


def test_public_subnet_and_nat_subnet_are_fine(aws: Any) -> None:
    ec2 = aws("ec2")
    vpc, subnet, table = vpc_with_subnet(ec2)
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    findings = checks.check_network(ec2, vpc_id=vpc, subnets={subnet: "us-east-1a"}, region=REGION)
    # An internet gateway without public IPs on launch is still private.
    assert findings[1].status is Status.BLOCKER and "no public IP" in findings[1].summary
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
    findings = checks.check_network(ec2, vpc_id=vpc, subnets={subnet: "us-east-1a"}, region=REGION)
    assert findings[1].status is Status.OK and "public" in findings[1].summary


def test_wrong_zone_missing_subnet_and_missing_vpc(aws: Any) -> None:
    ec2 = aws("ec2")
    vpc, subnet, _ = vpc_with_subnet(ec2, zone="us-east-1b")
    findings = checks.check_network(
        ec2,
        vpc_id=vpc,
        subnets={subnet: "us-east-1a", "subnet-0123456789abcdef0": "us-east-1a"},
        region=REGION,
    )
    statuses = {f.check: f for f in findings}
    assert statuses[f"subnet {subnet}"].status is Status.BLOCKER
    assert f'"{subnet}": "us-east-1b"' in statuses[f"subnet {subnet}"].fix
    assert statuses["subnet subnet-0123456789abcdef0"].status is Status.BLOCKER
    gone = checks.check_network(
        ec2, vpc_id="vpc-0123456789abcdef0", subnets={subnet: "us-east-1b"}, region=REGION
    )
    assert [f.status for f in gone] == [Status.BLOCKER]


# ---- Slack ---------------------------------------------------------------------------------


def test_slack_token_states(aws: Any) -> None:
    ssm = aws("ssm")
    name = f"/test/{secrets.token_hex(4)}/slack-token"

    def check(configured: bool = True) -> Any:
        return checks.check_slack_token(ssm, parameter_name=name, slack_configured=configured)

    absent = check()
    assert absent.status is Status.WARN and "--type SecureString" in absent.fix
    assert name in absent.fix
    assert check(configured=False).status is Status.OK
    ssm.put_parameter(Name=name, Type="String", Value="xoxb-1-plain")
    plain = check()  # a String parameter: the token would sit unencrypted
    assert plain.status is Status.WARN and "unencrypted" in plain.summary
    assert "xoxb-1-plain" not in plain.summary + plain.fix
    ssm.delete_parameter(Name=name)
    ssm.put_parameter(Name=name, Type="SecureString", Value="not-a-bot-token")
    assert check().status is Status.WARN
    ssm.put_parameter(Name=name, Type="SecureString", Value="xoxb-1-secret", Overwrite=True)
    good = check()
    assert good.status is Status.OK and "xoxb-1-secret" not in good.summary


def test_access_denied_is_a_warning_not_a_crash(aws: Any) -> None:
    iam = boto3.client("iam", region_name=REGION)
    stub = Stubber(iam)
    stub.add_client_error("get_role", "AccessDenied", "not allowed", 403)
    stub.activate()

    def client(service: str) -> Any:
        return iam if service == "iam" else aws(service)

    target = Target(region=REGION, instance_types=("g5.xlarge",), ami_id="ami-12c6146b", local=True)
    findings = {f.check: f for f in run_checks(target, client)}
    role = findings["spot service-linked role"]
    assert role.status is Status.WARN and "AccessDenied" in role.summary


def test_a_quota_without_a_known_code_is_skipped_with_how_to_find_it() -> None:
    class Ec2:  # moto does not know dl1.24xlarge
        def describe_instance_types(self, **_: Any) -> dict[str, Any]:
            return {"InstanceTypes": [{"VCpuInfo": {"DefaultVCpus": 96}}]}

    client, stub = stubbed_quotas({"L-85EED4F7": 96.0})  # DL spot; DL on-demand has no code
    spot, on_demand = checks.check_quotas(client, Ec2(), ("dl1.24xlarge",), region=REGION)
    stub.assert_no_pending_responses()
    assert spot.status is Status.OK
    assert on_demand.status is Status.SKIPPED and "list-service-quotas" in on_demand.summary
