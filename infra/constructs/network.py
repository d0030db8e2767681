"""Where the GPU instances run: the platform team's subnets, or a VPC that costs nothing idle.

The VPC respot makes has public subnets only (no NAT gateway: ~$33/month each, for nothing
while no job runs) and a free S3 gateway endpoint, so checkpoint traffic stays on the AWS
network. Instances get a public address for egress; their security group admits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

PUBLIC_SUBNET_MASK = 20  # 4091 addresses per zone: many more instances than any quota
MAX_AZS = 3  # spot capacity is per zone: more zones, more pools (env-agnostic synth uses 2)


@dataclass(frozen=True)
class SubnetPlacement:
    """A subnet and its availability zone (the placement policy chooses among them)."""

    subnet_id: str
    availability_zone: str


class Network(Construct):
    """The VPC and subnets instances are launched into."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc_id: str | None = None,
        subnets: Mapping[str, str] | None = None,
        flow_log_bucket: s3.IBucket | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if vpc_id is not None:
            if not subnets:
                raise ValueError("an existing VPC needs its subnets (subnet id -> zone)")
            self.vpc: ec2.IVpc = ec2.Vpc.from_vpc_attributes(
                self, "Vpc", vpc_id=vpc_id, availability_zones=sorted(set(subnets.values()))
            )
            self.placements = tuple(
                SubnetPlacement(subnet_id, zone) for subnet_id, zone in sorted(subnets.items())
            )
            return

        flow_logs = {}
        if flow_log_bucket is not None:
            flow_logs["FlowLog"] = ec2.FlowLogOptions(
                destination=ec2.FlowLogDestination.to_s3(flow_log_bucket, "vpc-flow-logs/"),
                traffic_type=ec2.FlowLogTrafficType.ALL,
            )
        vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=MAX_AZS,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public",
                    subnet_type=ec2.SubnetType.PUBLIC,
                    cidr_mask=PUBLIC_SUBNET_MASK,
                    map_public_ip_on_launch=True,
                )
            ],
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)
            },
            flow_logs=flow_logs or None,
        )
        self.vpc = vpc
        self.placements = tuple(
            SubnetPlacement(subnet.subnet_id, subnet.availability_zone)
            for subnet in vpc.public_subnets
        )
