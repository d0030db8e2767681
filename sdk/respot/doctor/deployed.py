"""Which extra regions the deployed control plane uses, next to what cdk.json says.

The control plane learns its satellite regions from its functions' RESPOT_SATELLITE_REGIONS,
set at deploy time from `extra_regions`; the doctor reads `extra_regions` from cdk.json (and
`-c`). When the two drift (a deploy with another `-c extra_regions`, cdk.json edited since),
the doctor would check regions the control plane does not use and miss one it does. So once
the stack is deployed, the doctor reads the environment of one of its control-plane functions
(CloudFormation ListStackResources, then Lambda GetFunctionConfiguration: both read-only, in
ReadOnlyAccess), checks those regions and any cdk.json adds, and reports the drift with the
fix. Before the first deploy there is nothing to read and cdk.json is all there is.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from respot.control.config import ENV_LAUNCH_TEMPLATE_ID, ENV_SATELLITE_REGIONS
from respot.doctor.checks import error_code
from respot.doctor.findings import Finding, ok, warn
from respot.doctor.target import Target

CHECK = "satellite regions"


def deployed_regions(cfn: Any, lam: Any, *, stack_name: str) -> tuple[str, ...] | None:
    """The regions the deployed functions carry in RESPOT_SATELLITE_REGIONS (empty: none);
    None when the stack is not deployed or has no control-plane function."""
    try:
        pages = cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name)
        functions = [
            r["PhysicalResourceId"]
            for page in pages
            for r in page["StackResourceSummaries"]
            if r["ResourceType"] == "AWS::Lambda::Function"
            and r.get("PhysicalResourceId")
            and not str(r.get("ResourceStatus", "")).startswith("DELETE")
        ]
    except ClientError as exc:
        if error_code(exc) != "ValidationError":  # "Stack with id ... does not exist"
            raise
        return None
    for name in functions:
        configuration = lam.get_function_configuration(FunctionName=name)
        variables = configuration.get("Environment", {}).get("Variables", {})
        # Every control-plane function carries the same environment (infra/stack.py); the
        # CDK's own helper functions (log retention, custom resources) carry none of it.
        if ENV_LAUNCH_TEMPLATE_ID in variables:
            raw = variables.get(ENV_SATELLITE_REGIONS) or ""
            return tuple(r.strip() for r in raw.split(",") if r.strip())
    return None


def regions_to_check(
    intended: tuple[str, ...], deployed: tuple[str, ...] | None
) -> tuple[str, ...]:
    """The deployed regions (what the control plane uses now), then those cdk.json adds (what
    the next deploy needs); cdk.json's alone before the first deploy."""
    if deployed is None:
        return intended
    return deployed + tuple(r for r in intended if r not in deployed)


def check_regions(target: Target, deployed: tuple[str, ...] | None) -> list[Finding]:
    """No finding before the first deploy; else ok, or a warning naming both lists."""
    if deployed is None:
        return []
    intended = target.extra_regions
    if set(deployed) == set(intended):
        listed = ", ".join(deployed) if deployed else "none"
        return [ok(CHECK, f"the deployed control plane uses extra regions: {listed} (as cdk.json)")]
    said = ",".join(deployed) or "(none)"
    wanted = ",".join(intended) or "(none)"
    if intended:
        fix = f"cdk deploy --all -c extra_regions={wanted}"
    else:
        fix = f"cdk deploy {target.stack_name} (without extra_regions)"
    gone = [r for r in deployed if r not in intended]
    if gone:
        fix += ", then cdk destroy " + " ".join(f"{target.stack_name}-{r}" for r in gone)
    return [
        warn(
            CHECK,
            f"the deployed functions carry {ENV_SATELLITE_REGIONS}={said} but cdk.json (and -c) "
            f"say extra_regions={wanted}: the control plane places jobs in the first, the next "
            "deploy changes it to the second; the doctor checks both",
            f"redeploy with the intended extra_regions: {fix}; or, if the deployed regions are "
            "the intended ones, "
            + (f"set extra_regions to {said} in cdk.json" if deployed else "drop extra_regions"),
        )
    ]
