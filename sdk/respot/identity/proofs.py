"""Who sent a command: a signed `sts:GetCallerIdentity` request, verified by executing it.

No shared secret is involved, in the way HashiCorp Vault's AWS IAM auth method and
Kubernetes' aws-iam-authenticator prove an AWS identity to a third party:

1. The laptop (`sign_proof`) builds an STS `GetCallerIdentity` request and signs it with
   SigV4 and its own AWS credentials, but does not send it. Three extra headers are part of
   the signature: `x-respot-job-id`, `x-respot-command` and `x-respot-digest` (the SHA-256
   of the rest of the message), and a fourth, `x-respot-nonce`, random per proof: SigV4 is
   deterministic to the second, so without it the same command published twice within one
   second carried the same proof and the second was refused as a replay. The signed
   request (method, URL, body, headers) travels in the SNS message as `proof`.
2. The commands function (`Verifier.verify`) checks the request is exactly an STS
   GetCallerIdentity call to the one STS endpoint it trusts (host allow-list: no SSRF),
   that the bound headers equal the message's job id, command and digest, and that it was
   signed within `max_age` (a few minutes) of its *publication*: the SNS envelope's
   `Timestamp`, which SNS stamps once and every redelivery repeats. Judged at arrival, a
   command whose first delivery failed (a throttle, a timeout) came back after the queue's
   360-s visibility timeout with an "expired" proof and was dead-lettered: a lost cancel kept
   a GPU billing. Then it sends the request to STS itself. STS
   checks the signature; its answer names the caller's ARN, which becomes `submitted_by` /
   `requested_by`. Anyone who changes the message, the job or the command breaks the
   signature; STS itself refuses a signature older than 15 minutes, respot after `max_age`.
3. A `ProofLedger` (a conditional DynamoDB put with a TTL) remembers each signature with
   the SNS message id it first came in, the caller STS named and the whole proof's SHA-256:
   the same message delivered again with that very proof passes with that caller, without
   asking STS again (STS refuses a signature older than 15 minutes; the fourth delivery of a
   message comes 18 minutes after the first); a proof that only shares the signature is sent
   to STS; the same proof in another message is a replay and is refused.

What the digest covers (`signed_content`): the JSON object of the message *as sent*, read
back from the text the control plane received (`read_message`), not the control plane's
re-serialisation of the model it validated. So a control plane whose models gained a field
with a default, or whose pydantic writes a float or a time another way, still accepts a
proof an older SDK signed; the command it acts on is validated from that very object, so
nothing unsigned rides along (a repeated key or a NaN is refused; `null` is not "absent").

Why a header-signed POST (Vault's form) rather than a query-presigned GET URL
(aws-iam-authenticator's form): both are verified by STS the same way, but the local
emulator (moto) identifies the caller and checks the signature only from the
`Authorization` header. With the header form the local runtime runs this for real.

A refusal raises `ProofError` (the handler dead-letters the message with its text); STS
being unreachable raises `StsUnavailableError` (the message is retried).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from respot.exceptions import RespotError
from respot.wire.messages import CancelCommand, IdentityProof, JobSubmission, encode

STS_BODY = "Action=GetCallerIdentity&Version=2011-06-15"
CONTENT_TYPE = "application/x-www-form-urlencoded; charset=utf-8"
JOB_HEADER = "x-respot-job-id"
COMMAND_HEADER = "x-respot-command"
DIGEST_HEADER = "x-respot-digest"
# Random per proof, so that two proofs of one command signed within the same second differ
# (SigV4 signs the time to the second). Optional for the verifier (an older SDK sends none),
# but signed when present.
NONCE_HEADER = "x-respot-nonce"
BOUND_HEADERS = (JOB_HEADER, COMMAND_HEADER, DIGEST_HEADER)
ALLOWED_HEADERS = frozenset(
    {
        "authorization",
        "x-amz-date",
        "x-amz-security-token",
        "content-type",
        NONCE_HEADER,
        *BOUND_HEADERS,
    }
)
REQUIRED_SIGNED = frozenset({"host", "x-amz-date", *BOUND_HEADERS})
DEFAULT_MAX_AGE = timedelta(minutes=5)
CLOCK_SKEW = timedelta(minutes=1)
# STS refuses a SigV4 signature older than this whatever respot decides; a redelivery after it
# is accepted only if the proof was verified once already (the ledger remembers its caller).
STS_SIGNATURE_LIFETIME = timedelta(minutes=15)
MAX_ANSWER_BYTES = 64 * 1024

# What a deployment parameter's `proof_digest` says when its commands function checks
# `content_digest`; without it (a stack before that), the SDK signs `legacy_command_digest`.
CANONICAL_DIGEST = "canonical"

# Top-level keys the digest leaves out: the proof itself, and the identity the control plane
# fills in from STS's answer (whatever a message claims there is replaced, never trusted).
UNSIGNED_KEYS = frozenset({"proof", "submitted_by", "requested_by"})

ENV_STS_URL = "RESPOT_STS_URL"
ENV_ADMINS = "RESPOT_ADMIN_PRINCIPALS"

AUTH_PATTERN = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[A-Za-z0-9]{4,128})/(?P<date>\d{8})"
    r"/(?P<region>[a-z0-9-]+)/(?P<service>[a-z0-9-]+)/aws4_request, ?"
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
AMZ_DATE_FORMAT = "%Y%m%dT%H%M%SZ"


class ProofError(RespotError):
    """The identity proof is missing, forged, expired, replayed or for another message."""


class MalformedMessageError(RespotError, ValueError):
    """A command's text is not one unambiguous JSON object (not JSON, a repeated key, NaN)."""


class StsUnavailableError(RespotError):
    """STS could not be asked (network, throttling): the message is retried, not refused."""


@dataclass(frozen=True)
class Caller:
    """Who signed a proof, as STS answered: the ARN, the unique user id, the account."""

    arn: str
    user_id: str
    account: str
    signature: str


def sts_url(region: str | None, endpoint_url: str | None = None) -> str:
    """The STS endpoint to sign for: the regional one on AWS, the emulator's locally."""
    if endpoint_url:
        return endpoint_url.rstrip("/") + "/"
    return f"https://sts.{region or 'us-east-1'}.amazonaws.com/"


def read_message(text: str) -> dict[str, Any]:
    """The JSON object a command's text holds, read strictly: what is signed and acted on.

    `MalformedMessageError` if the text is not JSON, not an object, repeats a key in any
    object (`json.loads` keeps the last silently, other parsers the first: the digest and
    the command acted on could be read from different values), or holds a number that is
    not finite (`NaN`, `Infinity`, `1e999`: not JSON, and no canonical form).
    """
    try:
        value = json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_float=_finite_float,
        )
    except MalformedMessageError:
        raise
    except (ValueError, RecursionError) as exc:
        raise MalformedMessageError(f"the message is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedMessageError(
            f"the message is a JSON {type(value).__name__}, not an object of fields"
        )
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise MalformedMessageError(
                f"the message gives the key {key[:80]!r} twice in one object; a signed message "
                "gives each field once (send it with respot's SDK or CLI)"
            )
        obj[key] = value
    return obj


def _no_constant(name: str) -> Any:
    raise MalformedMessageError(f"the message holds {name}, which is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise MalformedMessageError(f"the message holds the number {text[:40]}, beyond a double")
    return value


def signed_content(message: Mapping[str, Any]) -> bytes:
    """The canonical form the digest covers: `message` without `UNSIGNED_KEYS` (top level),
    keys sorted, no whitespace, non-ASCII escaped, numbers as Python writes an int or a double.

    A function of the JSON *values*, not of the text's spelling: the SDK computes it from the
    object it is about to send, the control plane from the object it received (`read_message`),
    so `1e-3` and `0.001`, or any key order, agree. `null` is a value, not an absent key: a
    `null` nobody signed changes the digest.
    """
    content = {k: v for k, v in message.items() if k not in UNSIGNED_KEYS}
    return json.dumps(
        content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def content_digest(message: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of `signed_content(message)`: the value of the `x-respot-digest` header."""
    return hashlib.sha256(signed_content(message)).hexdigest()


def command_digest(command: BaseModel) -> str:
    """The digest of `command` as the SDK publishes it (`encode`: its JSON, `None` fields left
    out), read back as the control plane reads it.

    `submitted_by` / `requested_by` are not covered because the control plane fills them in
    from STS's answer; everything else is bound to the signature.
    """
    return content_digest(read_message(encode(command)))


def legacy_command_digest(command: BaseModel) -> str:
    """The digest SDKs signed before `content_digest`, and still sign for a stack that does not
    say it checks `content_digest` (`Deployment.proof_digest`): SHA-256 of `command`'s compact
    JSON without `UNSIGNED_KEYS`. Such a stack recomputes it from the model it validated (so it
    refuses a proof once the SDK's model and its own differ); this one reads it back from
    the text (`legacy_digest`).
    """
    text = command.model_dump_json(exclude=set(UNSIGNED_KEYS), exclude_none=True)
    return hashlib.sha256(text.encode()).hexdigest()


def digest_to_sign(command: BaseModel, proof_digest: str | None) -> str:
    """The digest to sign for `command` on a deployment whose parameter says `proof_digest`."""
    if proof_digest == CANONICAL_DIGEST:
        return command_digest(command)
    return legacy_command_digest(command)


def legacy_digest(text: str) -> str | None:
    """The digest SDKs before `content_digest` signed, read from the text they sent.

    They hashed their model's compact JSON without `UNSIGNED_KEYS`, and sent the same JSON
    with `proof` in it (`encode`): so it is the text received with those top-level members
    cut out, byte for byte, whatever fields our model has gained since. None if `text` is not
    one JSON object. Accepted only until no SDK of that age is in use (docs/security.md).
    """
    decoder = json.JSONDecoder()
    members: list[str] = []
    i = _skip_space(text, 0)
    if text[i : i + 1] != "{":
        return None
    i = _skip_space(text, i + 1)
    try:
        while text[i : i + 1] != "}":
            key, end = decoder.raw_decode(text, i)
            colon = _skip_space(text, end)
            if not isinstance(key, str) or text[colon : colon + 1] != ":":
                return None
            _, end = decoder.raw_decode(text, _skip_space(text, colon + 1))
            if key not in UNSIGNED_KEYS:
                members.append(text[i:end])
            i = _skip_space(text, end)
            if text[i : i + 1] == ",":
                i = _skip_space(text, i + 1)
                if text[i : i + 1] != '"':
                    return None
            elif text[i : i + 1] != "}":
                return None
    except ValueError:
        return None
    return hashlib.sha256(("{" + ",".join(members) + "}").encode()).hexdigest()


def _skip_space(text: str, i: int) -> int:
    while text[i : i + 1] in (" ", "\t", "\n", "\r"):
        i += 1
    return i


@dataclass(frozen=True)
class Received:
    """A command's text as the control plane received it, and the object it holds (read
    strictly by `read_message`: `MalformedMessageError` otherwise; never given apart from
    the text, so the two cannot disagree).

    The command is validated from `content`, and its proof must carry one of `digests()`.
    """

    text: str
    content: dict[str, Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", read_message(self.text))

    def digests(self) -> set[str]:
        """What a proof of this message may be bound to: `content_digest`, or for an SDK that
        predates it, `legacy_digest`."""
        legacy = legacy_digest(self.text)
        return {content_digest(self.content), *([legacy] if legacy else [])}


def sign_proof(
    credentials: Any,
    *,
    region: str,
    url: str,
    job_id: str,
    command: str,
    digest: str,
) -> IdentityProof:
    """A signed, unsent GetCallerIdentity request bound to (job id, command, digest)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    request = AWSRequest(
        method="POST",
        url=url,
        data=STS_BODY,
        headers={
            "Content-Type": CONTENT_TYPE,
            JOB_HEADER: job_id,
            COMMAND_HEADER: command,
            DIGEST_HEADER: digest,
            NONCE_HEADER: secrets.token_hex(16),
        },
    )
    frozen = credentials.get_frozen_credentials()
    SigV4Auth(frozen, "sts", region).add_auth(request)
    headers = {k: str(v) for k, v in request.headers.items()}
    return IdentityProof(method="POST", url=url, body=STS_BODY, headers=headers)


def prove(
    command: JobSubmission | CancelCommand,
    session: Any,
    *,
    region: str | None,
    url: str,
    proof_digest: str | None = CANONICAL_DIGEST,
) -> IdentityProof:
    """Sign a proof for `command` with the credentials of boto3 `session`.

    `proof_digest` is what the deployment says its commands function checks
    (`Deployment.proof_digest`): `CANONICAL_DIGEST`, else (a stack before it) the legacy digest.
    """
    credentials = session.get_credentials()
    if credentials is None:
        raise ProofError(
            "no AWS credentials found to prove who you are; log in (e.g. `aws sso login`) "
            "or set AWS_PROFILE"
        )
    return sign_proof(
        credentials,
        region=region or session.region_name or "us-east-1",
        url=url,
        job_id=command.job_id,
        command=command.command,
        digest=digest_to_sign(command, proof_digest),
    )
