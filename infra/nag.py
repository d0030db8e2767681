"""cdk-nag for respot: the AwsSolutions pack on every synth, and suppressions with reasons.

A suppression names one rule, the resource it is attached to and, for IAM5, the exact
wildcard it accepts; its reason says why that finding is right for respot. There is no
stack-wide suppression.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import cx_api
from cdk_nag import AwsSolutionsChecks, NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import IConstruct

# Suppression patterns name the region and account as CDK renders them in an env-agnostic
# stack; a stack with a concrete env (what `cdk deploy` gives it from the shell's credentials,
# and every stack of a deployment with extra_regions) renders the values themselves.
_CONCRETE = {
    "<AWS::Region>": r"(?:<AWS::Region>|[a-z]{2}(?:-[a-z]+)+-\d)",
    "<AWS::AccountId>": r"(?:<AWS::AccountId>|\d{12})",
}


def _pattern(pattern: str) -> str:
    for token, alternatives in _CONCRETE.items():
        pattern = pattern.replace(token, alternatives)
    return pattern


def add_checks(app: cdk.App) -> None:
    """Run the AwsSolutions pack over everything in `app` when it synthesizes."""
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))


def suppress(
    construct: IConstruct,
    rule: str,
    reason: str,
    *,
    applies_to: Sequence[str] = (),
    children: bool = True,
) -> None:
    """Accept one finding of `rule` on `construct`; `applies_to` entries are regexes."""
    NagSuppressions.add_resource_suppressions(
        construct,
        [
            NagPackSuppression(
                id=f"AwsSolutions-{rule}",
                reason=reason,
                applies_to=[
                    RegexAppliesTo(regex=f"/{_pattern(pattern)}/") for pattern in applies_to
                ]
                or None,
            )
        ],
        apply_to_children=children,
    )


def errors(assembly: cx_api.CloudAssembly) -> list[str]:
    """Every error annotation of the synthesized stacks (cdk-nag reports its findings so)."""
    found = []
    for stack in assembly.stacks:
        for message in stack.messages:
            if message.level == cx_api.SynthesisMessageLevel.ERROR:
                found.append(f"{message.id}: {message.entry.data}")
    return found
