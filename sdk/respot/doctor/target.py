"""What the doctor checks an account for: the region and the deploy settings that touch it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

CDK_QUALIFIER = "hnb659fds"  # the CDK's default bootstrap qualifier
# aws-cdk-lib v2 templates refuse to deploy on a bootstrap stack older than version 6
# (their CheckBootstrapVersion rule).
MIN_BOOTSTRAP_VERSION = 6
SPOT_SERVICE_LINKED_ROLE = "AWSServiceRoleForEC2Spot"


@dataclass(frozen=True)
class Target:
    """An account/region and the settings a deploy there would use (from cdk.json)."""

    region: str
    instance_types: tuple[str, ...]
    ami_id: str | None = None
    ami_parameter: str | None = None
    vpc_id: str | None = None
    subnets: Mapping[str, str] = field(default_factory=dict)  # subnet id -> zone
    stack_name: str = "Respot"
    # The SecureString parameter the functions read the Slack bot token from (by name).
    slack_token_parameter: str = "/respot/slack-token"  # noqa: S105 - a name, not a token
    slack_configured: bool = False  # a slack_channel is set: the team expects messages
    bootstrap_qualifier: str = CDK_QUALIFIER
    local: bool = False  # the local runtime's emulator, not AWS
    # Satellite regions (`extra_regions`) and what the control plane reads there.
    extra_regions: tuple[str, ...] = ()
    satellite_parameter: str = "/respot/satellite"
    forward_rules: int = 0  # forwarding rules a satellite stack makes (one per wiring rule)
    root_volume_gb: int = 200  # each instance's gp3 root volume (cdk.json `root_volume_gb`)
    workspaces: bool = True  # `respot notebook` on (cdk.json `workspaces`): the laptop's plugin
