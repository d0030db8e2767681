"""The laptop refuses an instance type the deployment does not allow, before any upload."""

from __future__ import annotations

import pytest

from respot.client.deployment import Deployment
from respot.client.handle import run
from respot.exceptions import SpecError
from respot.spec.training import TrainingEnvVar


class NoAws:
    """A session that fails the test if anything is sent to AWS."""

    def client(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("nothing may be sent before the spec is accepted")


def test_run_refuses_a_type_the_deployment_does_not_allow() -> None:
    deployment = Deployment.from_json(
        '{"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "table_name": "t", '
        '"bucket": "b", "instance_types": "g5.xlarge,g4dn.xlarge"}'
    )
    assert deployment.instance_types == ("g5.xlarge", "g4dn.xlarge")
    spec = TrainingEnvVar(name="x", entry_point="a.b:C", instance_types=["g5.xlarg"])
    with pytest.raises(SpecError) as exc:
        run(spec, deployment=deployment, session=NoAws())
    assert exc.value.problems == [
        "instance_types: g5.xlarg is not allowed by this deployment; choose from g5.xlarge, "
        "g4dn.xlarge (the platform team sets allowed_instance_types)"
    ]
