"""Shared fixtures of the CDK tests: synthesis without bundling, the stack's template once.

Bundling is skipped with the context `aws:cdk:bundling-stacks` = [] (CDK then stages no
asset and runs no pip), so these tests are fast and offline. `test_stack_synth.py` is the
one that bundles for real.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import aws_cdk as cdk  # after the jsii environment above
import pytest
from aws_cdk import assertions

NO_BUNDLING = {"aws:cdk:bundling-stacks": []}


def bare_stack(name: str = "Test") -> cdk.Stack:
    """An empty stack in an app that skips bundling."""
    return cdk.Stack(cdk.App(context=NO_BUNDLING), name)


def respot_template(**settings: Any) -> tuple[Any, assertions.Template]:
    """The respot stack for these settings and its template (bundling skipped)."""
    from infra.settings import DeploySettings
    from infra.stack import RespotStack

    wiring = settings.pop("wiring", None)
    extra = {"wiring": wiring} if wiring is not None else {}
    stack = RespotStack(
        cdk.App(context=NO_BUNDLING), "Respot", settings=DeploySettings(**settings), **extra
    )
    return stack, assertions.Template.from_stack(stack)


@pytest.fixture(scope="session")
def new_stack() -> Any:
    """`new_stack()`: an empty stack in an app that skips bundling."""
    return bare_stack


@pytest.fixture(scope="session")
def respot() -> tuple[Any, assertions.Template]:
    """The default stack (a VPC of its own, no optional context) and its template."""
    return respot_template()


@pytest.fixture(scope="session")
def template(respot: tuple[Any, assertions.Template]) -> assertions.Template:
    return respot[1]


@pytest.fixture(scope="session")
def resources(template: assertions.Template) -> dict[str, dict[str, Any]]:
    """Logical id -> resource of the default stack's template."""
    return template.to_json()["Resources"]
