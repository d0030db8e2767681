"""Errors of the account doctor."""

from __future__ import annotations

from respot.exceptions import RespotError


class DoctorError(RespotError):
    """The doctor could not be set up (e.g. a cdk.json it cannot read)."""
