"""Run every check for a target, in order, with the clients a factory gives."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from respot.aws.satellites import Satellite
from respot.doctor import checks, deployed, ebs, laptop, satellites, support
from respot.doctor.findings import Finding, skipped, warn
from respot.doctor.satellites import RegionalFactory
from respot.doctor.target import Target

ClientFactory = Callable[[str], Any]  # service name -> boto3 client

LOCAL_BOOTSTRAP = "the local runtime is provisioned from the wiring, not deployed with the CDK"
LOCAL_EBS = (
    "moto keeps no EBS quota and no account-default EBS key; on AWS this check reads them "
    "(an instance EC2 ends during launch for either says so in its job's timeline)"
)
LOCAL_QUOTAS = (
    "moto implements Service Quotas for the vpc service only, so EC2's vCPU quotas are not "
    "emulated; on AWS this check reads them"
)


def _guarded(name: str, check: Callable[[], Finding | list[Finding]]) -> list[Finding]:
    """Run one check; an AWS refusal to answer is a warning that says so, not a crash."""
    try:
        result = check()
    except ClientError as exc:
        return [
            warn(
                name,
                f"could not check ({checks.error_text(exc)})",
                "run the doctor with a role that may read it (e.g. ReadOnlyAccess)",
            )
        ]
    except (BotoCoreError, ResponseParserError) as exc:
        return [warn(name, f"could not check: {exc}", "check the network and region")]
    return result if isinstance(result, list) else [result]


def run_checks(
    target: Target, client: ClientFactory, regional: RegionalFactory | None = None
) -> list[Finding]:
    """Every finding for `target`, credentials first; nothing else runs without them.

    `regional(service, region)`: a client in an extra region (`target.extra_regions`)."""
    credentials, account = checks.check_credentials(client("sts"))
    findings = [credentials]
    names: tuple[str, ...] = (
        "CDK bootstrap",
        "stack",
        "spot service-linked role",
        support.FIS_ROLE_CHECK,
        "instance types",
        "quotas",
        ebs.GP3_CHECK,
        ebs.KEY_CHECK,
        "AMI",
        support.AMI_SUPPORT_CHECK,
        "network",
        "Slack token",
    )
    if account is None:
        names += tuple(f"satellite {r}" for r in target.extra_regions)
        return findings + [skipped(n, "needs working credentials") for n in names]
    region = target.region
    ec2 = client("ec2")
    ssm = client("ssm")
    if target.local:
        findings.append(skipped("CDK bootstrap", LOCAL_BOOTSTRAP))
    else:
        findings += _guarded(
            "CDK bootstrap",
            lambda: checks.check_bootstrap(
                ssm,
                client("cloudformation"),
                qualifier=target.bootstrap_qualifier,
                account=account,
                region=region,
            ),
        )
    if target.local:
        findings.append(skipped("stack", LOCAL_BOOTSTRAP))
    else:
        findings += _guarded(
            "stack",
            lambda: checks.check_stack(client("cloudformation"), stack_name=target.stack_name),
        )
    # The extra regions the deployed functions carry, if deployed (cdk.json's before that).
    extra_regions = target.extra_regions
    if not target.local:  # the local runtime's state names the regions its functions use
        carried: list[tuple[str, ...] | None] = []

        def regions() -> list[Finding]:
            carried.append(
                deployed.deployed_regions(
                    client("cloudformation"), client("lambda"), stack_name=target.stack_name
                )
            )
            return deployed.check_regions(target, carried[0])

        findings += _guarded(deployed.CHECK, regions)
        if carried:
            extra_regions = deployed.regions_to_check(target.extra_regions, carried[0])
    findings += _guarded("spot service-linked role", lambda: checks.check_spot_role(client("iam")))
    findings += _guarded(support.FIS_ROLE_CHECK, lambda: support.check_fis_role(client("iam")))
    zones = sorted(set(target.subnets.values()))
    findings += _guarded(
        "instance types",
        lambda: checks.check_instance_types(ec2, target.instance_types, zones=zones, region=region),
    )
    if target.local:
        findings.append(skipped("quotas", LOCAL_QUOTAS))
    else:
        findings += _guarded(
            "quotas",
            lambda: checks.check_quotas(
                client("service-quotas"), ec2, target.instance_types, region=region
            ),
        )
    if target.local:
        findings.append(skipped(ebs.GP3_CHECK, LOCAL_EBS))
        findings.append(skipped(ebs.KEY_CHECK, LOCAL_EBS))
    else:
        findings += _guarded(
            ebs.GP3_CHECK,
            lambda: ebs.check_gp3_storage(
                client("service-quotas"),
                ec2,
                instance_types=target.instance_types,
                root_volume_gb=target.root_volume_gb,
                region=region,
            ),
        )
        findings += _guarded(
            ebs.KEY_CHECK, lambda: ebs.check_default_ebs_key(ec2, client("kms"), region=region)
        )
    findings += _guarded(
        "AMI",
        lambda: checks.check_ami(
            ec2, ssm, ami_id=target.ami_id, ami_parameter=target.ami_parameter, region=region
        ),
    )
    findings += _guarded(
        support.AMI_SUPPORT_CHECK,
        lambda: support.check_configured_ami(
            ec2,
            ami_id=target.ami_id,
            ami_parameter=target.ami_parameter,
            today=dt.datetime.now(dt.UTC).date(),
        ),
    )
    findings += _guarded(
        "network",
        lambda: checks.check_network(
            ec2, vpc_id=target.vpc_id, subnets=target.subnets, region=region
        ),
    )
    findings += _guarded(
        "Slack token",
        lambda: checks.check_slack_token(
            ssm,
            parameter_name=target.slack_token_parameter,
            slack_configured=target.slack_configured,
        ),
    )
    findings.append(
        laptop.check_session_manager_plugin(local=target.local, workspaces=target.workspaces)
    )
    if extra_regions:
        if regional is None:
            raise ValueError("extra_regions need a regional client factory")
        for extra in extra_regions:
            findings += _satellite_region(target, regional, account, extra)
    return findings


def _satellite_region(
    target: Target, regional: RegionalFactory, account: str, region: str
) -> list[Finding]:
    """One extra region: its satellite, its forwarding, its instance types and quotas."""
    found: list[Satellite] = []

    def satellite() -> Finding:
        sat, problem = satellites.read_satellite(target, regional("ssm", region), region)
        if sat is None:
            assert problem is not None
            return problem
        found.append(sat)
        return satellites.check_satellite(
            target, sat, regional("ec2", region), regional("iam", region), region
        )

    findings = _guarded(f"satellite {region}", satellite)
    findings += _guarded(
        f"forwarding {region}",
        lambda: satellites.check_forwarding(
            target, regional("events", region), regional("sqs", region), region, account=account
        ),
    )
    ec2 = regional("ec2", region)
    zones = sorted({s.availability_zone for s in found[0].subnets}) if found else []
    findings += satellites.region_suffixed(
        _guarded(
            "instance types",
            lambda: checks.check_instance_types(
                ec2, target.instance_types, zones=zones, region=region
            ),
        ),
        region,
    )
    if target.local:
        findings.append(skipped(f"quotas ({region})", LOCAL_QUOTAS))
    else:
        findings += satellites.region_suffixed(
            _guarded(
                "quotas",
                lambda: checks.check_quotas(
                    regional("service-quotas", region), ec2, target.instance_types, region=region
                ),
            ),
            region,
        )
    return findings


def blocks(findings: list[Finding]) -> bool:
    """True if any finding stops a deploy."""
    return any(f.status.blocks for f in findings)
