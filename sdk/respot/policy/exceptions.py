"""Errors raised by the placement policy package."""

from __future__ import annotations


class PolicyError(Exception):
    """Base error of `respot.policy`."""


class UnknownPolicyError(PolicyError, KeyError):
    """A policy name that `make_policy` does not know."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown policy"


class TraceError(PolicyError, ValueError):
    """A spot availability trace that is missing or malformed (names the file and the problem)."""


class JobSpecError(PolicyError, ValueError):
    """Job parameters that make no sense (negative work, zero tick length, ...)."""
