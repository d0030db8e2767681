"""Clients in the region of what they read, wherever the instance runs.

An instance in a satellite region (docs/deploy.md, "Extra regions") reads what the job names
in the home region: its secrets (`secrets: {NAME: <Secrets Manager ARN>}`) and its image in
the home account's ECR. Nothing is copied into the satellite region. A secret lives in the
region its ARN names and Secrets Manager answers for it only there; an ECR login token is for
the registry of the region that issued it. So each is read through a client of *its* region
(the ARN's, the registry host's), not of the instance's; the satellite instance role may read
them there (infra/constructs/fleet.py, the same statements as the home instance role's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from respot.spec.names import ECR_IMAGE, arn_region, registry_region

__all__ = ["ECR_IMAGE", "RegionalClients", "arn_region", "registry_region"]


class RegionalClients:
    """`clients(service, region)`: one boto3 client per service and region, made when needed.

    `region` None means the instance's own region (`default_region`); `endpoint_url` is the
    emulator's, locally (one endpoint serves every region there).
    """

    def __init__(
        self,
        default_region: str | None,
        endpoint_url: str | None = None,
        factory: Callable[..., Any] | None = None,
    ) -> None:
        self.default_region = default_region
        self.endpoint_url = endpoint_url
        self._factory = factory
        self._clients: dict[tuple[str, str | None], Any] = {}

    def __call__(self, service: str, region: str | None = None) -> Any:
        region = region or self.default_region
        key = (service, region)
        if key not in self._clients:
            factory = self._factory
            if factory is None:
                import boto3

                factory = boto3.session.Session(region_name=region).client
            self._clients[key] = factory(
                service, region_name=region, endpoint_url=self.endpoint_url
            )
        return self._clients[key]

    def in_region(self, service: str) -> Callable[[str | None], Any]:
        """`service`'s client by region: what `resolve_secrets` takes."""
        return lambda region: self(service, region)
