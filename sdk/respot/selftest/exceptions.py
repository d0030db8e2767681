"""Errors of the deployment self-test."""

from __future__ import annotations

from respot.exceptions import RespotError


class SelftestError(RespotError):
    """The self-test could not run or did not pass."""


class SelftestStoppedError(SelftestError):
    """A wait of the self-test stopped (timeout, job ended, experiment failed); says which."""
