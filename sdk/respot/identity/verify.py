"""The control plane's side of an identity proof: execute it against STS, refuse replays.

The proof's format (what is signed, the bound headers, the digest) is `respot.identity.proofs`;
the whole protocol is described there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

from respot.identity.proofs import (
    ALLOWED_HEADERS,
    AMZ_DATE_FORMAT,
    AUTH_PATTERN,
    BOUND_HEADERS,
    CLOCK_SKEW,
    COMMAND_HEADER,
    DEFAULT_MAX_AGE,
    DIGEST_HEADER,
    ENV_STS_URL,
    JOB_HEADER,
    MAX_ANSWER_BYTES,
    NONCE_HEADER,
    REQUIRED_SIGNED,
    STS_BODY,
    STS_SIGNATURE_LIFETIME,
    Caller,
    ProofError,
    Received,
    StsUnavailableError,
    sts_url,
)
from respot.wire.messages import CancelCommand, IdentityProof, JobSubmission


class HttpPost(Protocol):
    """Sends one POST and returns (status, body); raises OSError when it cannot."""

    def __call__(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout: float
    ) -> tuple[int, bytes]: ...


def urllib3_post(
    url: str, body: bytes, headers: Mapping[str, str], timeout: float
) -> tuple[int, bytes]:
    """POST with urllib3: no redirects, no retries, a bounded answer."""
    import urllib3

    http = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(total=timeout))
    try:
        response = http.request(
            "POST", url, body=body, headers=dict(headers), redirect=False, preload_content=False
        )
        data = response.read(MAX_ANSWER_BYTES + 1)
        response.release_conn()
    except urllib3.exceptions.HTTPError as exc:
        raise OSError(str(exc)) from exc
    return int(response.status), bytes(data)


class ProofLedger(Protocol):
    """Remembers used proofs; `use` raises `ProofError` for a replay. `recall` answers the
    caller a proof was verified for in this very message (a redelivery), else None.

    `fingerprint` (`proof_fingerprint`) names the whole proof STS verified, not only its
    signature: a recall must match it, or a proof with another's signature and headers bound
    to another message would be answered with the other's caller without STS seeing it.
    """

    def use(
        self,
        signature: str,
        message_id: str,
        expires_at: datetime,
        caller: Caller | None = None,
        fingerprint: str = "",
    ) -> None: ...

    def recall(self, signature: str, message_id: str, fingerprint: str) -> Caller | None: ...


def proof_fingerprint(proof: IdentityProof) -> str:
    """The SHA-256 of the whole proof (method, URL, every header, body), as a ledger keeps it."""
    text = json.dumps(proof.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class DynamoProofLedger:
    """Used proofs in the jobs table: `pk=PROOF#<sha256(signature)>`, removed by TTL.

    `use` is one conditional put: it succeeds if the signature is new or was first seen
    in this very message (a redelivery); otherwise the proof is a replay. It keeps the caller
    STS named and the proof's fingerprint, which `recall` (a consistent read) gives back to a
    redelivery of that message carrying that very proof.
    """

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    @staticmethod
    def _key(signature: str) -> dict[str, dict[str, str]]:
        digest = hashlib.sha256(signature.encode()).hexdigest()
        return {"pk": {"S": f"PROOF#{digest}"}, "sk": {"S": "PROOF"}}

    def recall(self, signature: str, message_id: str, fingerprint: str) -> Caller | None:
        item = self.client.get_item(
            TableName=self.table_name, Key=self._key(signature), ConsistentRead=True
        ).get("Item")
        if not item or item.get("message_id", {}).get("S") != message_id:
            return None
        if not fingerprint or item.get("proof_sha256", {}).get("S") != fingerprint:
            return None  # not the proof STS verified (or recorded before): ask STS
        arn = item.get("caller_arn", {}).get("S")
        if not arn:
            return None  # recorded by a stack before callers were kept: ask STS
        return Caller(
            arn=arn,
            user_id=item.get("caller_user_id", {}).get("S", ""),
            account=item.get("caller_account", {}).get("S", ""),
            signature=signature,
        )

    def use(
        self,
        signature: str,
        message_id: str,
        expires_at: datetime,
        caller: Caller | None = None,
        fingerprint: str = "",
    ) -> None:
        from botocore.exceptions import ClientError

        item: dict[str, dict[str, str]] = {
            **self._key(signature),
            "message_id": {"S": message_id},
            "ttl": {"N": str(int(expires_at.timestamp()))},
        }
        if caller is not None:
            item["caller_arn"] = {"S": caller.arn}
            item["caller_user_id"] = {"S": caller.user_id}
            item["caller_account"] = {"S": caller.account}
        if fingerprint:
            item["proof_sha256"] = {"S": fingerprint}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR message_id = :m",
                ExpressionAttributeValues={":m": {"S": message_id}},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise ProofError(
                    "replayed identity proof: it was already used by another message; "
                    "publish the command again (a new proof is signed each time)"
                ) from exc
            raise


class Verifier:
    """Checks identity proofs against one trusted STS endpoint."""

    def __init__(
        self,
        *,
        sts_url: str,
        region: str,
        ledger: ProofLedger | None,
        max_age: timedelta = DEFAULT_MAX_AGE,
        post: HttpPost = urllib3_post,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        timeout: float = 10.0,
    ) -> None:
        parts = urlsplit(sts_url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"{sts_url!r} is not an STS endpoint URL")
        self.sts_url = sts_url
        self.region = region
        self.ledger = ledger
        self.max_age = max_age
        self.post = post
        self.clock = clock
        self.timeout = timeout

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, dynamodb: Any = None, table: str = ""
    ) -> Verifier:
        """The verifier the stack configures: its STS URL, region and the proof ledger."""
        env = os.environ if env is None else env
        region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"
        url = env.get(ENV_STS_URL) or sts_url(region)
        ledger = DynamoProofLedger(table, dynamodb) if dynamodb is not None and table else None
        return cls(sts_url=url, region=region, ledger=ledger)

    def verify(
        self,
        command: JobSubmission | CancelCommand,
        message_id: str,
        *,
        received: Received,
        ledger: ProofLedger | None = None,
        published_at: datetime | None = None,
    ) -> Caller:
        """The verified caller of `command`; `ProofError` with the reason otherwise.

        `received` is the message as it came in, which `command` was validated from
        (`received.content`): the proof's digest must be one of `received.digests()`. `ledger`
        (else the verifier's own) records the proof; without either, replays are not detected
        (tests of the checks alone). `published_at` is when SNS published the message (its
        envelope's `Timestamp`): the proof's age is judged then, so a redelivery after a failed
        first try is not "expired"; without it, the age is judged now. A redelivery of a
        message whose proof was verified already (the same proof, same message id) gets the
        caller the ledger kept, without STS.
        """
        proof = command.proof
        if proof is None:
            raise ProofError(
                f"{command.command} of {command.job_id} carries no identity proof; "
                "send it with respot's SDK or CLI (they sign one)"
            )
        headers = self._check_shape(proof)
        auth = AUTH_PATTERN.fullmatch(headers["authorization"])
        if auth is None:
            raise ProofError("the proof's Authorization header is not an AWS SigV4 signature")
        self._check_binding(command, received, headers, auth)
        used = ledger or self.ledger
        fingerprint = proof_fingerprint(proof)
        if used is not None:
            known = used.recall(auth.group("signature"), message_id, fingerprint)
            if known is not None:
                return known  # this very proof and message, verified on an earlier delivery
        signed_at = self._check_age(headers, auth, published_at)
        caller = self._ask_sts(proof, headers, auth.group("signature"))
        if used is not None:
            used.use(
                caller.signature, message_id, signed_at + timedelta(hours=1), caller, fingerprint
            )
        return caller

    # ---- the checks, in order ----------------------------------------------------------------

    def _check_shape(self, proof: IdentityProof) -> dict[str, str]:
        if proof.method != "POST":
            raise ProofError(f"the proof is a {proof.method} request; only POST is accepted")
        if _normal_url(proof.url) != _normal_url(self.sts_url):
            raise ProofError(
                f"the proof is addressed to {proof.url!r}, not to this deployment's STS "
                f"endpoint {self.sts_url!r}"
            )
        if proof.body != STS_BODY:
            raise ProofError("the proof is not an sts:GetCallerIdentity request")
        headers: dict[str, str] = {}
        for name, value in proof.headers.items():
            lower = name.lower()
            if lower not in ALLOWED_HEADERS:
                raise ProofError(f"the proof carries the header {name!r}, which is not allowed")
            if lower in headers:
                raise ProofError(f"the proof carries the header {name!r} twice")
            if "\r" in value or "\n" in value:
                raise ProofError(f"the proof's header {name!r} has a line break")
            headers[lower] = value
        for needed in ("authorization", "x-amz-date", *BOUND_HEADERS):
            if needed not in headers:
                raise ProofError(f"the proof has no {needed} header")
        return headers

    def _check_binding(
        self,
        command: JobSubmission | CancelCommand,
        received: Received,
        headers: dict[str, str],
        auth: re.Match[str],
    ) -> None:
        signed = set(auth.group("signed").split(";"))
        missing = REQUIRED_SIGNED - signed
        for optional in ("x-amz-security-token", NONCE_HEADER):
            if optional in headers:
                missing |= {optional} - signed
        if missing:
            raise ProofError(f"the proof does not sign {', '.join(sorted(missing))}")
        if auth.group("service") != "sts" or auth.group("region") != self.region:
            raise ProofError(
                f"the proof is signed for {auth.group('service')} in {auth.group('region')}, "
                f"not sts in {self.region}"
            )
        expected: dict[str, set[str]] = {
            JOB_HEADER: {command.job_id},
            COMMAND_HEADER: {command.command},
            DIGEST_HEADER: received.digests(),
        }
        for name, values in expected.items():
            if headers[name] not in values:
                what = "content" if name == DIGEST_HEADER else name.removeprefix("x-respot-")
                raise ProofError(
                    f"the proof was signed for another {what} ({name}: {headers[name][:80]!r}), "
                    f"not this message's"
                )

    def _check_age(
        self, headers: dict[str, str], auth: re.Match[str], published_at: datetime | None
    ) -> datetime:
        try:
            signed_at = datetime.strptime(headers["x-amz-date"], AMZ_DATE_FORMAT).replace(
                tzinfo=UTC
            )
        except ValueError:
            raise ProofError("the proof's X-Amz-Date is not a time") from None
        if auth.group("date") != headers["x-amz-date"][:8]:
            raise ProofError("the proof's credential scope date is not its X-Amz-Date")
        now = self.clock()
        if signed_at - now > CLOCK_SKEW:
            raise ProofError(f"the proof is signed in the future ({signed_at.isoformat()})")
        # The age is judged when SNS published the message: a redelivery repeats that time.
        at, when = (now, "") if published_at is None else (published_at, "when published ")
        if published_at is not None:
            if published_at - now > CLOCK_SKEW:
                raise ProofError(
                    f"the message claims to be published in the future ({published_at.isoformat()})"
                )
            if signed_at - published_at > CLOCK_SKEW:
                raise ProofError(
                    f"the proof is signed at {signed_at.isoformat()}, after the message "
                    f"carrying it was published ({published_at.isoformat()})"
                )
        if at - signed_at > self.max_age:
            minutes = self.max_age.total_seconds() / 60
            raise ProofError(
                f"the proof expired: signed at {signed_at.isoformat()}, valid {minutes:g} "
                f"minutes, {when}{(at - signed_at).total_seconds():.0f} s old; "
                "publish the command again"
            )
        if now - signed_at > STS_SIGNATURE_LIFETIME:
            minutes = STS_SIGNATURE_LIFETIME.total_seconds() / 60
            raise ProofError(
                f"the proof expired: signed at {signed_at.isoformat()}, more than {minutes:g} "
                "minutes ago (STS refuses older signatures) and never verified before; "
                "publish the command again"
            )
        return signed_at

    def _ask_sts(self, proof: IdentityProof, headers: dict[str, str], signature: str) -> Caller:
        try:
            status, body = self.post(
                self.sts_url, STS_BODY.encode(), _send_headers(headers), self.timeout
            )
        except OSError as exc:
            raise StsUnavailableError(f"STS could not be reached: {exc}") from exc
        if len(body) > MAX_ANSWER_BYTES:
            raise StsUnavailableError("STS answered with more than 64 KiB")
        if status in (429, 500, 502, 503, 504):
            raise StsUnavailableError(f"STS answered HTTP {status}")
        fields = _xml_fields(body)
        if status != 200:
            code = fields.get("Code", f"HTTP {status}")
            raise ProofError(f"STS refused the proof: {code}: {fields.get('Message', '')}")
        arn, user_id, account = fields.get("Arn"), fields.get("UserId"), fields.get("Account")
        if not arn or not arn.startswith("arn:"):
            raise ProofError("STS's answer names no caller ARN")
        return Caller(arn=arn, user_id=user_id or "", account=account or "", signature=signature)


def _normal_url(url: str) -> tuple[str, str, int | None, str, str, str]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise ProofError(f"the proof's URL {url!r} has an invalid port") from None
    if parts.username or parts.password:
        raise ProofError("the proof's URL carries credentials")
    return (
        parts.scheme,
        (parts.hostname or "").lower(),
        port,
        parts.path or "/",
        parts.query,
        parts.fragment,
    )


def _send_headers(headers: dict[str, str]) -> dict[str, str]:
    names = {
        "authorization": "Authorization",
        "x-amz-date": "X-Amz-Date",
        "x-amz-security-token": "X-Amz-Security-Token",
        "content-type": "Content-Type",
    }
    return {names.get(k, k): v for k, v in headers.items()}


def _xml_fields(body: bytes) -> dict[str, str]:
    """Leaf elements of an STS XML answer by local name (first of each)."""
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        return {}
    try:
        root = ET.fromstring(body)  # noqa: S314 - no DTDs (checked above); from allow-listed STS
    except ET.ParseError:
        return {}
    fields: dict[str, str] = {}
    for element in root.iter():
        name = element.tag.rsplit("}", 1)[-1]
        if element.text and element.text.strip() and name not in fields:
            fields[name] = element.text.strip()
    return fields


def principal_matches(arn: str, entry: str) -> bool:
    """True if caller `arn` is the principal `entry` names.

    `entry` is a user or role ARN. A role ARN matches every session of that role
    (`arn:aws:sts::<acct>:assumed-role/<role>/<session>`); any other entry must be equal.
    """
    if arn == entry:
        return True
    m = re.fullmatch(r"arn:(aws[a-z-]*):iam::(\d{12}):role/(?:.*/)?([\w+=,.@-]+)", entry)
    if m is None:
        return False
    partition, account, role = m.groups()
    prefix = f"arn:{partition}:sts::{account}:assumed-role/{role}/"
    return arn.startswith(prefix) and "/" not in arn[len(prefix) :]
