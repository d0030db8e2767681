"""The AWS FIS experiment the self-test starts: interrupt the self-test job's spot instance.

One definition, read by the stack (`infra/constructs/selftest.py`, an
`AWS::FIS::ExperimentTemplate`) and by the local runtime (which creates the same template in
its emulator, `infra/local/cloud.py`). The FIS API shape is the one of
`fis:CreateExperimentTemplate` (camelCase keys).

The action is `aws:ec2:send-spot-instance-interruptions`: "Immediately after the action is
initiated, the target instance receives an EC2 instance rebalance recommendation", the
interruption notice comes two minutes before the interruption time, which is
`durationBeforeInterruption` after the start ("from 2 to 15 minutes ... ISO 8601 format. For
example, PT2M represents two minutes"; AWS FIS user guide, "Amazon EC2 actions"). With PT2M
the notice arrives at once and the instance is reclaimed two minutes later.
"""

from __future__ import annotations

from typing import Any

from respot.core.lifecycle import MANAGED_TAG

ACTION_ID = "aws:ec2:send-spot-instance-interruptions"
RESOURCE_TYPE = "aws:ec2:spot-instance"
DURATION_BEFORE_INTERRUPTION = "PT2M"
# The self-test job carries this tag (a job tag, so it reaches the instance); the template
# targets running spot instances that carry it *and* the deployment's managed tag.
SELFTEST_TAG = "respot-selftest"
SELFTEST_TAG_VALUE = "true"
TARGET_NAME = "SelftestInstances"
ACTION_NAME = "InterruptSelftest"
TEMPLATE_DESCRIPTION = "respot selftest: interrupt the selftest job's spot instance"


def target_tags(deployment_name: str) -> dict[str, str]:
    """The tags an instance must carry to be interrupted by the self-test."""
    return {SELFTEST_TAG: SELFTEST_TAG_VALUE, MANAGED_TAG: deployment_name}


def experiment_template(role_arn: str, deployment_name: str) -> dict[str, Any]:
    """`CreateExperimentTemplate` arguments (without clientToken)."""
    return {
        "description": TEMPLATE_DESCRIPTION,
        "roleArn": role_arn,
        "stopConditions": [{"source": "none"}],
        "targets": {
            TARGET_NAME: {
                "resourceType": RESOURCE_TYPE,
                "resourceTags": target_tags(deployment_name),
                "filters": [{"path": "State.Name", "values": ["running"]}],
                "selectionMode": "ALL",
            }
        },
        "actions": {
            ACTION_NAME: {
                "actionId": ACTION_ID,
                "description": "two-minute spot interruption notice, then reclaim",
                "parameters": {"durationBeforeInterruption": DURATION_BEFORE_INTERRUPTION},
                "targets": {"SpotInstances": TARGET_NAME},
            }
        },
        "tags": {"Name": "respot-selftest", MANAGED_TAG: deployment_name},
    }


def duration_seconds(iso: str) -> float:
    """Seconds of an ISO 8601 duration of minutes and seconds, e.g. PT2M, PT2M30S, PT90S."""
    import re

    match = re.fullmatch(r"PT(?:(\d+)M)?(?:(\d+)S)?", iso)
    if not match or not any(match.groups()):
        raise ValueError(f"{iso!r} is not an ISO 8601 duration such as PT2M")
    minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return minutes * 60.0 + seconds
