"""Errors of sweeps: one base class and narrow subclasses."""

from __future__ import annotations

from respot.exceptions import RespotError


class SweepError(RespotError):
    """Base class of the errors a sweep raises on purpose."""


class SweepNotFoundError(SweepError):
    """No sweep with this id is recorded in the deployment."""


class SweepStorageError(SweepError):
    """The sweep's study could not be read or written."""
