"""The agent's side: a boto3 session holding this job's credentials, refreshed before expiry.

`job_session` asks the `credentials` function (Lambda Invoke, allowed to the instance role on
that one function) with an identity proof signed by the instance role's credentials (from
IMDSv2, as every AWS SDK gets them on EC2), and wraps the answer in botocore's
`RefreshableCredentials`: botocore asks again 15 minutes before the hour is up (the advisory
refresh), and every client made from the session uses the new keys. Two instances of one job
(a warm replacement beside the attempt it replaces) each hold their own session.

The ask is retried while the control plane has not bound the instance to its attempt yet
(a boot can outrun that write), at most `BIND_WAIT_SECONDS`; then it fails with the reason.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from respot.credentials.policy import COMMAND
from respot.exceptions import RespotError
from respot.identity.proofs import content_digest, sign_proof

logger = logging.getLogger(__name__)

# How long a new instance waits for the control plane to bind it to its attempt (it links the
# instance right after RunInstances returns, seconds before the instance can boot).
BIND_WAIT_SECONDS = 300.0
RETRY_SECONDS = 5.0


class JobCredentialsError(RespotError):
    """The credentials function refused this instance, or could not be reached in time."""


class CredentialsSource:
    """Asks the credentials function for this job's credentials (one ask per call)."""

    def __init__(
        self,
        *,
        function: str,
        job_id: str,
        instance_id: str,
        region: str,
        sts_url: str,
        instance_credentials: Any,  # botocore credentials of the instance role
        invoke: Callable[[str, bytes], dict[str, Any]],
        sleep: Callable[[float], None] = time.sleep,
        bind_wait_seconds: float = BIND_WAIT_SECONDS,
    ) -> None:
        self.function = function
        self.job_id = job_id
        self.instance_id = instance_id
        self.region = region
        self.sts_url = sts_url
        self.instance_credentials = instance_credentials
        self.invoke = invoke
        self.sleep = sleep
        self.bind_wait_seconds = bind_wait_seconds

    def request(self) -> bytes:
        """The request's JSON: job, instance, and a proof bound to them."""
        body = {"command": COMMAND, "job_id": self.job_id, "instance_id": self.instance_id}
        proof = sign_proof(
            self.instance_credentials,
            region=self.region,
            url=self.sts_url,
            job_id=self.job_id,
            command=COMMAND,
            digest=content_digest(body),
        )
        return json.dumps({**body, "proof": proof.model_dump()}).encode()

    def fetch(self) -> dict[str, str]:
        """Credentials in botocore's metadata form; retried while the instance is unbound."""
        deadline = time.monotonic() + self.bind_wait_seconds
        while True:
            answer = self.invoke(self.function, self.request())
            if "access_key_id" in answer:
                logger.info("job %s: credentials until %s", self.job_id, answer["expiration"])
                return {
                    "access_key": answer["access_key_id"],
                    "secret_key": answer["secret_access_key"],
                    "token": answer["session_token"],
                    "expiry_time": answer["expiration"],
                }
            reason = str(answer.get("refused") or answer.get("errorMessage") or answer)[:500]
            if time.monotonic() >= deadline:
                raise JobCredentialsError(
                    f"no credentials for job {self.job_id} on {self.instance_id}: {reason}"
                )
            logger.warning("job %s: credentials refused (%s); asking again", self.job_id, reason)
            self.sleep(RETRY_SECONDS)


def lambda_invoker(client: Any) -> Callable[[str, bytes], dict[str, Any]]:
    """Invoke a function synchronously with `client` (boto3 Lambda) and read its JSON answer."""

    def invoke(function: str, payload: bytes) -> dict[str, Any]:
        answer = client.invoke(FunctionName=function, Payload=payload)
        data = json.loads(answer["Payload"].read() or b"{}")
        return data if isinstance(data, dict) else {"refused": repr(data)[:200]}

    return invoke


def job_session(source: CredentialsSource, region: str) -> Any:
    """A boto3 session whose credentials are the job's, refreshed by `source` before expiry."""
    import boto3
    import botocore.session
    from botocore.credentials import RefreshableCredentials

    credentials = RefreshableCredentials.create_from_metadata(
        metadata=source.fetch(), refresh_using=source.fetch, method="respot-job-credentials"
    )
    core = botocore.session.get_session()
    core._credentials = credentials  # boto3 has no public setter for refreshable ones
    return boto3.session.Session(botocore_session=core, region_name=region)
