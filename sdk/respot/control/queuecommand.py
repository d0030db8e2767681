"""The admin's command that changes the queue's settings without a deploy.

Published on the jobs topic (command=queue-settings) with an identity proof, like a cancel;
the commands function verifies the sender through STS and applies it only for a principal in
the stack's `admin_principal_arns` (`ControlPlane.set_queue_settings`). The settings are
checked here first, so a bad one is refused on the laptop with the field named, and again
by the control plane.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from respot.identity.proofs import IdentityProof
from respot.queue.settings import parse_settings

# What an identity proof is bound to (a job id's shape): one value for every such command.
SETTINGS_PROOF_ID = "queue-settings"


class QueueSettingsCommand(BaseModel):
    """An admin's new queue settings (the whole object: it replaces the previous one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = 1
    command: Literal["queue-settings"] = "queue-settings"
    settings: dict[str, Any]
    requested_at: datetime
    requested_by: str | None = None  # the control plane sets it to the caller STS verified
    proof: IdentityProof | None = None

    @field_validator("settings")
    @classmethod
    def _check(cls, value: dict[str, Any]) -> dict[str, Any]:
        parse_settings(value)  # QueueSettingsError (a ValueError) names the field
        return value

    @property
    def job_id(self) -> str:
        """The id an identity proof is bound to (respot.identity.proofs)."""
        return SETTINGS_PROOF_ID
