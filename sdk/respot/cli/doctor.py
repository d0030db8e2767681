"""`respot doctor`: is this account and region ready for `cdk deploy`, and for jobs?

On AWS it reads the deploy settings from `cdk.json` (and `-c key=value`, as `cdk` does) and
checks the account the shell's credentials reach; with `--local` (or RESPOT_LOCAL=1) it checks
the emulator of the runtime `respot local up` runs. Each problem comes with its fix; the exit
code is 1 when one of them would stop a deploy. The checks are `respot.doctor`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from respot.cli.context import JsonOption, LocalOption, console, fail, print_json, reports_errors

if TYPE_CHECKING:
    from respot.doctor import ClientFactory, Finding, Target
    from respot.doctor.satellites import RegionalFactory

STATUS_STYLE = {"ok": "green", "warn": "yellow", "blocker": "bold red", "skipped": "dim"}


@reports_errors
def doctor(
    local: LocalOption = False,
    cdk_json: Annotated[
        Path, typer.Option("--cdk-json", help="The CDK app's cdk.json whose context to read.")
    ] = Path("cdk.json"),
    context: Annotated[
        list[str] | None,
        typer.Option("--context", "-c", help="A context value as for `cdk deploy -c key=value`."),
    ] = None,
    region: Annotated[
        str | None, typer.Option(help="The region to check (default: the shell's).")
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Check an account before `cdk deploy`: credentials, CDK bootstrap, spot role, quotas,
    AMI, subnets and endpoints, Slack token. Exit code 1 if something blocks a deploy."""
    from respot.client.localstate import local_requested
    from respot.doctor import blocks, run_checks

    if local_requested(local):
        target, client, regional = _local_target()
    else:
        target, client, regional = _aws_target(cdk_json, context or [], region)
    findings = run_checks(target, client, regional)
    if json_output:
        print_json(
            {
                "region": target.region,
                "local": target.local,
                "findings": [f.to_dict() for f in findings],
            }
        )
    else:
        _print(findings, target)
    raise typer.Exit(1 if blocks(findings) else 0)


def _forward_rules() -> int:
    """How many EventBridge rules a satellite stack forwards (one per wiring rule)."""
    from infra.wiring import WIRING

    return len(WIRING.rules)


def _local_target() -> tuple[Target, ClientFactory, RegionalFactory]:
    from respot.client.localstate import connect_local, read_state
    from respot.doctor import Target

    deployment, session = connect_local()
    state = read_state()
    facts: dict[str, Any] = (state.extra if state else {}).get("doctor", {})
    target = Target(
        region=deployment.region or "us-east-1",
        instance_types=tuple(facts.get("instance_types", ("g5.xlarge",))),
        ami_id=facts.get("ami_id"),
        vpc_id=facts.get("vpc_id"),
        subnets=facts.get("subnets", {}),
        stack_name=facts.get("stack_name") or "the local runtime",
        slack_token_parameter=facts.get("slack_token_parameter") or "/respot/slack-token",
        slack_configured=True,
        local=True,
        extra_regions=tuple(facts.get("extra_regions", ())),
        satellite_parameter=facts.get("satellite_parameter") or "/respot/satellite",
        forward_rules=_forward_rules(),
    )
    endpoint = state.endpoint_url if state else None

    def regional(service: str, region: str) -> Any:
        return session.client(service, region_name=region, endpoint_url=endpoint)

    return target, lambda service: deployment.client(service, session), regional


def _aws_target(
    cdk_json: Path, context: list[str], region: str | None
) -> tuple[Target, Any, RegionalFactory]:
    import boto3

    from infra.regions import satellite_parameter_name
    from infra.settings import DeploySettings, DeploySettingsError
    from respot.doctor import Target

    values: dict[str, Any] = {}
    if cdk_json.exists():
        try:
            values.update(json.loads(cdk_json.read_text()).get("context", {}))
        except (OSError, ValueError, AttributeError) as exc:
            fail(f"{cdk_json}: not a cdk.json with a context object ({exc})")
    for item in context:
        key, sep, value = item.partition("=")
        if not sep or not key:
            fail(f"--context {item!r}: write key=value, e.g. -c vpc_id=vpc-0123456789abcdef0")
        values[key.strip()] = value
    try:
        settings = DeploySettings.from_context(values.get)
    except DeploySettingsError as exc:
        fail(f"deploy settings ({cdk_json} and -c): {exc}")
    session = boto3.session.Session(region_name=region)
    if not session.region_name:
        fail("no AWS region: pass --region, or set AWS_REGION / a profile region")
    target = Target(
        region=session.region_name,
        instance_types=settings.instance_types,
        ami_id=settings.ami_id,
        ami_parameter=None if settings.ami_id else settings.ami_parameter,
        vpc_id=settings.vpc_id,
        subnets=dict(settings.subnets),
        stack_name=settings.stack_name,
        slack_token_parameter=settings.slack_token_parameter_name,
        slack_configured=bool(settings.slack_channel),
        extra_regions=settings.extra_regions,
        satellite_parameter=satellite_parameter_name(settings.name_prefix),
        forward_rules=_forward_rules(),
        root_volume_gb=settings.root_volume_gb,
        workspaces=settings.workspaces,
    )

    def regional(service: str, region: str) -> Any:
        return session.client(service, region_name=region)

    return target, session.client, regional


def _print(findings: list[Finding], target: Target) -> None:
    from rich.table import Table
    from rich.text import Text

    out = console()
    where = "the local runtime's emulator" if target.local else f"region {target.region}"
    table = Table(title=f"respot doctor: {where}", show_lines=False, expand=False)
    for column in ("check", "status", "finding", "fix"):
        table.add_column(column, overflow="fold")
    for f in findings:
        # Text, not markup: what AWS and cdk.json say is printed as it is (no [tags], no
        # :emoji: codes such as the ":secret:" in a Secrets Manager ARN).
        table.add_row(
            Text(f.check),
            Text(f.status.value, style=STATUS_STYLE[f.status.value]),
            Text(f.summary),
            Text(f.fix),
        )
    out.print(table)
    blockers = sum(f.status.blocks for f in findings)
    warnings = sum(f.status.value == "warn" for f in findings)
    if blockers:
        out.print(f"[bold red]{blockers} blocker(s)[/]: fix them before `cdk deploy`.")
    else:
        out.print(f"[green]ready[/] ({warnings} warning(s)).")
