"""The control plane's side: who asks, is it a live attempt of that job, then the credentials.

`Broker.vend` takes the request the agent sent to the `credentials` function:
1. its identity proof is verified by STS (`respot.identity.verify.Verifier`, bound to the
   job id, the command `job-credentials` and the digest of the request): the caller must be
   an instance role's session, whose name EC2 sets to the instance id;
2. the instance must be the one the control plane linked to this job when it launched it
   (`JobTable.instance_owner`), and that attempt must be live in the job record (not ended,
   the job not ended);
3. `sts:AssumeRole` on the job role with the session policy of that job alone
   (`respot.credentials.policy`: its prefix, and its submitter's wheelhouse as the job
   record names the submitter), for an hour (role chaining's cap).
Every refusal is a `CredentialsRefusedError` naming the reason; nothing else is returned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from respot.aws.jobs import JobTable
from respot.core.job import Attempt, JobRecord
from respot.credentials.policy import (
    DURATION_SECONDS,
    MAX_SESSION_POLICY_CHARS,
    instance_of,
    packed_size,
    session_name,
    session_policy,
)
from respot.exceptions import RespotError
from respot.identity.proofs import ProofError, Received
from respot.identity.verify import Verifier
from respot.policy.pools import region_of
from respot.spec.jobid import JobId
from respot.wire.messages import IdentityProof


class CredentialsRefusedError(RespotError):
    """The request is not from a live attempt of the job it names (the reason says why)."""


class CredentialsRequest(BaseModel):
    """What the agent sends (the proof signs every other field, `proof_digest` of the rest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: Literal["job-credentials"] = "job-credentials"  # COMMAND
    job_id: JobId
    instance_id: str = Field(pattern=r"^i-[0-9a-f]{8,17}$")
    proof: IdentityProof


@dataclass(frozen=True)
class JobCredentials:
    """Credentials for one job's objects, as the function returns them."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration: datetime

    def as_json(self) -> dict[str, str]:
        """The function's answer (the agent's `vending` reads it)."""
        return {
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "session_token": self.session_token,
            "expiration": self.expiration.isoformat(),
        }


@dataclass
class Broker:
    """Vends a job's credentials to that job's live instances only."""

    verifier: Verifier
    jobs: JobTable
    sts: Any  # boto3 STS client with the credentials function's role
    job_role_arn: str
    bucket: str
    instance_role_names: frozenset[str]
    partition: str = "aws"
    # {region: the satellite's checkpoint bucket as `policy.SATELLITE_BUCKET`} (extra_regions)
    satellite_buckets: Mapping[str, str] = field(default_factory=dict)

    def vend(self, text: str, request_id: str) -> JobCredentials:
        """Credentials for the job `text` (the request's JSON) names; `CredentialsRefusedError`."""
        try:
            received = Received(text)
            request = CredentialsRequest.model_validate(received.content)
        except (ValidationError, ValueError, RespotError) as exc:
            raise CredentialsRefusedError(f"not a credentials request: {exc}") from None
        try:
            caller = self.verifier.verify(
                request,  # type: ignore[arg-type]  # has job_id, command and proof
                request_id,
                received=received,
            )
        except ProofError as exc:
            raise CredentialsRefusedError(f"identity: {exc}") from None
        instance = instance_of(caller.arn, self.instance_role_names)
        if instance is None:
            raise CredentialsRefusedError(f"{caller.arn} is not a respot instance")
        if instance != request.instance_id:
            raise CredentialsRefusedError(
                f"{caller.arn} is instance {instance}, not {request.instance_id}"
            )
        record, attempt = self._check_live(request.job_id, instance)
        region = region_of(attempt.placement.availability_zone)
        reads = [s.key for s in record.spec.data if s.bucket == self.bucket]
        secrets = list(record.spec.secrets.values())
        policy = session_policy(
            self.bucket,
            request.job_id,
            self.partition,
            reads,
            secrets,
            submitted_by=record.submission.submitted_by,
            # where the control plane placed the attempt, never what the instance says
            satellite_bucket=self.satellite_buckets.get(region),
        )
        if packed_size(policy) > MAX_SESSION_POLICY_CHARS:
            raise CredentialsRefusedError(
                f"job {request.job_id} names too many secrets for one session policy "
                f"({packed_size(policy)} > {MAX_SESSION_POLICY_CHARS} characters)"
            )
        answer = self.sts.assume_role(
            RoleArn=self.job_role_arn,
            RoleSessionName=session_name(request.job_id, instance),
            Policy=json.dumps(policy, separators=(",", ":")),
            DurationSeconds=DURATION_SECONDS,
        )["Credentials"]
        return JobCredentials(
            access_key_id=answer["AccessKeyId"],
            secret_access_key=answer["SecretAccessKey"],
            session_token=answer["SessionToken"],
            expiration=answer["Expiration"],
        )

    def _check_live(self, job_id: str, instance: str) -> tuple[JobRecord, Attempt]:
        owner = self.jobs.instance_owner(instance)
        if owner is None or owner[0] != job_id:
            raise CredentialsRefusedError(f"instance {instance} was not launched for job {job_id}")
        record = self.jobs.get(job_id)
        if record is None:
            raise CredentialsRefusedError(f"job {job_id} does not exist")
        if record.state.is_terminal():
            raise CredentialsRefusedError(f"job {job_id} is {record.state.value}")
        attempt = next((a for a in record.attempts if a.number == owner[1]), None)
        if attempt is None or attempt.instance_id != instance or attempt.end is not None:
            raise CredentialsRefusedError(
                f"instance {instance} is not a live attempt of job {job_id} "
                f"(attempt {owner[1]}: {'gone' if attempt is None else attempt.end or 'unbound'})"
            )
        return record, attempt
