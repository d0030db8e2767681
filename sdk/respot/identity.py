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
   signed within `max_age` (a few minutes). Then it sends the request to STS itself. STS
   checks the signature; its answer names the caller's ARN, which becomes `submitted_by` /
   `requested_by`. Anyone who changes the message, the job or the command breaks the
   signature; STS itself refuses a signature older than 15 minutes, respot after `max_age`.
3. A `ProofLedger` (a conditional DynamoDB put with a TTL) remembers each signature with
   the SNS message id it first came in: the same message delivered again passes (and is a
   no-op downstream); the same proof in another message is a replay and is refused.

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
import os
import re
import secrets
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel

from respot.exceptions import RespotError
from respot.messages import CancelCommand, IdentityProof, JobSubmission, encode

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
MAX_ANSWER_BYTES = 64 * 1024

# What a deployment parameter's `proof_digest` says when its commands function checks
# `content_digest`; without it (a stack before that), the SDK signs `legacy_command_digest`.
CANONICAL_DIGEST = "canonical"

# Top-level keys the digest leaves out: the proof itself, and the identity the control plane
# fills in from STS's answer (whatever a message claims there is replaced, never trusted).
UNSIGNED_KEYS = frozenset({"proof", "submitted_by", "requested_by"})

ENV_STS_URL = "RESPOT_STS_URL"
ENV_ADMINS = "RESPOT_ADMIN_PRINCIPALS"

_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=(?P<key>[A-Za-z0-9]{4,128})/(?P<date>\d{8})"
    r"/(?P<region>[a-z0-9-]+)/(?P<service>[a-z0-9-]+)/aws4_request, ?"
    r"SignedHeaders=(?P<signed>[a-z0-9;-]+), ?"
    r"Signature=(?P<signature>[0-9a-f]{64})"
)
_AMZ_DATE = "%Y%m%dT%H%M%SZ"


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
    """Remembers used proofs; `use` raises `ProofError` for a replay."""

    def use(self, signature: str, message_id: str, expires_at: datetime) -> None: ...


class DynamoProofLedger:
    """Used proofs in the jobs table: `pk=PROOF#<sha256(signature)>`, removed by TTL.

    `use` is one conditional put: it succeeds if the signature is new or was first seen
    in this very message (a redelivery); otherwise the proof is a replay.
    """

    def __init__(self, table_name: str, client: Any) -> None:
        self.table_name = table_name
        self.client = client

    def use(self, signature: str, message_id: str, expires_at: datetime) -> None:
        from botocore.exceptions import ClientError

        key = hashlib.sha256(signature.encode()).hexdigest()
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={
                    "pk": {"S": f"PROOF#{key}"},
                    "sk": {"S": "PROOF"},
                    "message_id": {"S": message_id},
                    "ttl": {"N": str(int(expires_at.timestamp()))},
                },
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
    ) -> Caller:
        """The verified caller of `command`; `ProofError` with the reason otherwise.

        `received` is the message as it came in, which `command` was validated from
        (`received.content`): the proof's digest must be one of `received.digests()`. `ledger`
        (else the verifier's own) records the proof; without either, replays are not detected
        (tests of the checks alone).
        """
        proof = command.proof
        if proof is None:
            raise ProofError(
                f"{command.command} of {command.job_id} carries no identity proof; "
                "send it with respot's SDK or CLI (they sign one)"
            )
        headers = self._check_shape(proof)
        auth = _AUTH.fullmatch(headers["authorization"])
        if auth is None:
            raise ProofError("the proof's Authorization header is not an AWS SigV4 signature")
        self._check_binding(command, received, headers, auth)
        signed_at = self._check_age(headers, auth)
        caller = self._ask_sts(proof, headers, auth.group("signature"))
        used = ledger or self.ledger
        if used is not None:
            used.use(caller.signature, message_id, signed_at + timedelta(hours=1))
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

    def _check_age(self, headers: dict[str, str], auth: re.Match[str]) -> datetime:
        try:
            signed_at = datetime.strptime(headers["x-amz-date"], _AMZ_DATE).replace(tzinfo=UTC)
        except ValueError:
            raise ProofError("the proof's X-Amz-Date is not a time") from None
        if auth.group("date") != headers["x-amz-date"][:8]:
            raise ProofError("the proof's credential scope date is not its X-Amz-Date")
        now = self.clock()
        if signed_at - now > CLOCK_SKEW:
            raise ProofError(f"the proof is signed in the future ({signed_at.isoformat()})")
        if now - signed_at > self.max_age:
            minutes = self.max_age.total_seconds() / 60
            raise ProofError(
                f"the proof expired: signed at {signed_at.isoformat()}, valid {minutes:g} "
                "minutes; publish the command again"
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
