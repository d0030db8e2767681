"""A researcher's team from an IAM principal tag (issue 26): `respot:team` on the IAM role or
user that submitted the job.

STS GetCallerIdentity (how the control plane verifies who sent a command,
`respot.identity.verify`) answers an ARN and no tags, so the commands function reads them:
`iam:ListRoleTags` for an assumed role's session (`arn:aws:sts::<acct>:assumed-role/<role>/
<session>`) or a role, `iam:ListUserTags` for a user, only in the deployment's own account
(the grant names `role/*` and `user/*` of that account and nothing else; read-only). The
answer, a team or none, is cached per principal for `TTL_SECONDS` in the container.

The platform team's mapping (`queue.teams`) wins when it names the principal: the tag is not
even read then (`respot.queue.settings.team_of`). Anything that goes wrong (no such role, a
principal of another account, access denied, IAM throttling, a value that is not a team
name) gives no team and is logged: the job goes on in the mapping's team or `default`.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("respot.aws.teamtags")

TEAM_TAG = "respot:team"
TTL_SECONDS = 600.0  # a tag changed by the platform team reaches new jobs within this long
_TEAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@+=-]{0,63}")
_PRINCIPAL = re.compile(
    r"arn:aws[a-z-]*:(?:"
    r"sts::(?P<sts_account>\d{12}):assumed-role/(?P<session_role>[\w+=,.@-]+)/[^/]+"
    r"|iam::(?P<iam_account>\d{12}):(?P<kind>role|user)/(?:[\w+=,.@/-]*/)?(?P<name>[\w+=,.@-]+)"
    r")"
)


class _UnreadError(Exception):
    """IAM (or STS) did not answer: no team this time, and nothing cached."""


def principal_of(arn: str) -> tuple[str, str, str] | None:
    """(account, "role" | "user", name) of a principal ARN whose tags IAM keeps, else None
    (the account root, a federated user, anything else)."""
    m = _PRINCIPAL.fullmatch(arn)
    if m is None:
        return None
    if m.group("sts_account"):
        return m.group("sts_account"), "role", m.group("session_role")
    return m.group("iam_account"), m.group("kind"), m.group("name")


class PrincipalTeams:
    """Reads and caches the `respot:team` tag of the principals that submit jobs."""

    def __init__(
        self,
        iam: Callable[[], Any],
        account: Callable[[], str],
        *,
        ttl_seconds: float = TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._iam_factory = iam
        self._iam: Any = None
        self._account_factory = account
        self._account: str | None = None
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self._cache: dict[str, tuple[float, str | None]] = {}

    def team(self, arn: str | None) -> str | None:
        """The principal's team tag, or None (no tag, not readable, or not a team name)."""
        if not arn:
            return None
        cached = self._cache.get(arn)
        if cached is not None and self.clock() - cached[0] < self.ttl_seconds:
            return cached[1]
        try:
            team = self._read(arn)
        except _UnreadError:
            return None  # not cached: the next submission asks again
        self._cache[arn] = (self.clock(), team)
        return team

    def _read(self, arn: str) -> str | None:
        found = principal_of(arn)
        if found is None:
            return None
        account, kind, name = found
        try:
            if self._account is None:
                self._account = self._account_factory()
            if account != self._account:
                # IAM would answer for a same-named role or user of this account instead.
                log.info("no team tag read for %s: a principal of another account", arn)
                return None
            if self._iam is None:
                self._iam = self._iam_factory()
            if kind == "role":
                answer = self._iam.list_role_tags(RoleName=name)
            else:
                answer = self._iam.list_user_tags(UserName=name)
        except Exception as exc:  # never fail a submission for a tag: no team, said why
            log.warning("could not read the %s tag of %s: %s", TEAM_TAG, arn, exc)
            raise _UnreadError from exc
        value = next((t["Value"] for t in answer.get("Tags", []) if t["Key"] == TEAM_TAG), None)
        if value is None:
            return None
        if not _TEAM.fullmatch(value):
            log.warning(
                "the %s tag of %s is %r, not a team name (1-64 letters, digits, _.@+=-)",
                TEAM_TAG,
                arn,
                value,
            )
            return None
        return str(value)
