"""Isolation between researchers and between jobs (issue 24): what holds without IAM.

The IAM side (a researcher's write without `If-None-Match: *`, another job's credentials) is
proven under enforced IAM in `tests/e2e/test_iam_e2e.py` and on the synthesized documents in
`tests/infra/test_iam_policies.py`.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from respot.client.handle import _put_code
from respot.core.job import Attempt, AttemptEnd, JobRecord, Market, Placement
from respot.core.states import JobState
from respot.credentials.broker import Broker, CredentialsRefusedError
from respot.credentials.vending import CredentialsSource, JobCredentialsError, job_session
from respot.exceptions import DuplicateJobError
from respot.identity.proofs import Caller
from respot.storage import layout
from respot.wire.messages import IdentityProof
from tests.core.factories import T0, submission


@pytest.fixture
def s3(moto_endpoint: str, aws_credentials: None) -> Any:
    return boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")


def test_code_planted_under_a_job_id_before_its_owner_is_refused_before_publishing(s3: Any) -> None:
    # GIVEN someone who uploaded other bytes under the key the owner's code will have
    bucket = f"iso-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    code = b"PK the owner's code"
    sha = hashlib.sha256(code).hexdigest()
    key = layout.code_key("planted-job", sha)
    s3.put_object(Bucket=bucket, Key=key, Body=b"PK planted", IfNoneMatch="*")
    # WHEN the owner uploads THEN run() stops with the job id and the fix, before publishing
    with pytest.raises(DuplicateJobError, match=r"already holds other bytes.*choose another"):
        _put_code(s3, bucket, "planted-job", sha, code)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"PK planted"
    # AND the owner's own earlier upload of the same bytes is fine (a retried run())
    again = layout.code_key("retried-job", sha)
    _put_code(s3, bucket, "retried-job", sha, code)
    _put_code(s3, bucket, "retried-job", sha, code)
    assert s3.get_object(Bucket=bucket, Key=again)["Body"].read() == code


# ---- the credentials function's checks (respot.credentials.broker), on stand-ins -------------

INSTANCE_ROLE = "respot-instance"
ACCOUNT = "123456789012"


def _caller(session: str, role: str = INSTANCE_ROLE) -> Caller:
    arn = f"arn:aws:sts::{ACCOUNT}:assumed-role/{role}/{session}"
    return Caller(arn=arn, user_id=f"AROA:{session}", account=ACCOUNT, signature="s" * 64)


class _Verifier:
    """Stands for STS: the proof names `caller` (the real one: tests/security/test_identity)."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.seen: list[Any] = []

    def verify(self, command: Any, message_id: str, *, received: Any) -> Caller:
        self.seen.append(command)
        return self.caller


class _Jobs:
    def __init__(self, record: JobRecord, owner: tuple[str, int] | None) -> None:
        self.record, self.owner = record, owner

    def instance_owner(self, instance_id: str) -> tuple[str, int] | None:
        return self.owner

    def get(self, job_id: str) -> JobRecord | None:
        return self.record if job_id == self.record.job_id else None


class _Sts:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def assume_role(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        return {
            "Credentials": {
                "AccessKeyId": "ASIAJOB",
                "SecretAccessKey": "secret",
                "SessionToken": "token",
                "Expiration": datetime(2026, 11, 27, 1, 0, tzinfo=UTC),
            }
        }


def _record(job_id: str, instance: str, *, ended: bool = False, **spec: Any) -> JobRecord:
    placement = Placement(
        market=Market.SPOT, instance_type="g5.xlarge", subnet_id="subnet-1",
        availability_zone="us-east-1a",
    )  # fmt: skip
    attempt = Attempt(
        number=1, placement=placement, client_token="t", requested_at=T0, instance_id=instance,
        end=AttemptEnd.INTERRUPTED if ended else None,
    )  # fmt: skip
    return JobRecord(
        job_id=job_id, state=JobState.RUNNING, created_at=T0, updated_at=T0,
        submission=submission(job_id, **spec), attempts=[attempt],
    )  # fmt: skip


def _request(job_id: str, instance: str) -> str:
    proof = IdentityProof(url="https://sts.us-east-1.amazonaws.com/", body="x", headers={})
    body = {"command": "job-credentials", "job_id": job_id, "instance_id": instance}
    return json.dumps({**body, "proof": proof.model_dump()})


def _broker(caller: Caller, record: JobRecord, owner: tuple[str, int] | None) -> Broker:
    return Broker(
        verifier=_Verifier(caller),  # type: ignore[arg-type]
        jobs=_Jobs(record, owner),  # type: ignore[arg-type]
        sts=_Sts(),
        job_role_arn=f"arn:aws:iam::{ACCOUNT}:role/respot-job",
        bucket="jobs-bucket",
        instance_role_names=frozenset({INSTANCE_ROLE}),
    )


I1, I2 = "i-0123456789abcdef0", "i-0fedcba9876543210"


def test_a_live_instance_of_the_job_gets_credentials_for_that_job_alone() -> None:
    record = _record("job-a", I1)
    owner = f"arn:aws:iam::{ACCOUNT}:user/alice"
    record.submission = record.submission.model_copy(update={"submitted_by": owner})
    broker = _broker(_caller(I1), record, ("job-a", 1))
    vended = broker.vend(_request("job-a", I1), "req-1")
    assert vended.access_key_id == "ASIAJOB"
    (call,) = broker.sts.calls
    assert call["RoleArn"].endswith(":role/respot-job") and call["DurationSeconds"] == 3600
    policy = json.loads(call["Policy"])
    resources = [s["Resource"] for s in policy["Statement"] if s["Effect"] == "Allow"]
    # its own prefix, listing, and its submitter's wheelhouse (as the job record names them)
    wheels = layout.wheelhouse_prefix(layout.wheelhouse_scope(owner, "job-a"))
    assert resources == [
        "arn:aws:s3:::jobs-bucket/jobs/job-a/*",
        "arn:aws:s3:::jobs-bucket",
        f"arn:aws:s3:::jobs-bucket/{wheels}*",
    ]
    assert call["RoleSessionName"] == f"{I1}@job-a"


def test_an_attempt_in_a_satellite_region_gets_that_regions_bucket_and_no_other() -> None:
    satellites = {"us-west-2": "respot-123456789012-us-west-2-????????",
                  "eu-west-1": "respot-123456789012-eu-west-1-????????"}  # fmt: skip

    def buckets(zone: str) -> set[str]:
        record = _record("job-a", I1)
        placement = record.attempts[0].placement.model_copy(update={"availability_zone": zone})
        record.attempts[0] = record.attempts[0].model_copy(update={"placement": placement})
        broker = _broker(_caller(I1), record, ("job-a", 1))
        broker.satellite_buckets = satellites
        broker.vend(_request("job-a", I1), "req-1")
        policy = json.loads(broker.sts.calls[0]["Policy"])
        (listing,) = [s for s in policy["Statement"] if s["Sid"] == "ListJobsBucket"]
        found = listing["Resource"]
        return {found} if isinstance(found, str) else set(found)

    # where the control plane placed the attempt decides, not anything the instance says
    assert buckets("us-west-2b") == {
        "arn:aws:s3:::jobs-bucket",
        f"arn:aws:s3:::{satellites['us-west-2']}",
    }
    assert buckets("eu-west-1a") == {
        "arn:aws:s3:::jobs-bucket",
        f"arn:aws:s3:::{satellites['eu-west-1']}",
    }
    assert buckets("us-east-1a") == {"arn:aws:s3:::jobs-bucket"}


def test_the_function_reads_the_satellite_buckets_and_roles_from_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import lambdas.credentials as function

    satellites = {"us-west-2": "respot-123456789012-us-west-2-????????"}
    env = {"RESPOT_TABLE": "t", "RESPOT_BUCKET": "jobs-bucket", "AWS_DEFAULT_REGION": "us-east-1",
           "RESPOT_JOB_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/respot-job",
           "RESPOT_INSTANCE_ROLE_NAMES": "home-instances,Respot-us-west-2-instances",
           "RESPOT_SATELLITE_BUCKETS": json.dumps(satellites)}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    broker = function._from_env()
    assert broker.satellite_buckets == satellites
    assert broker.instance_role_names == {"home-instances", "Respot-us-west-2-instances"}
    monkeypatch.delenv("RESPOT_SATELLITE_BUCKETS")
    assert function._from_env().satellite_buckets == {}


@pytest.mark.parametrize(
    ("caller", "record", "owner", "asked", "reason"),
    [
        # another job's live instance asks for job-a's credentials
        (_caller(I2), _record("job-a", I1), ("job-b", 1), ("job-a", I2), "not launched for job"),
        # an instance claims to be another instance than the one that signed
        (_caller(I2), _record("job-a", I1), ("job-a", 1), ("job-a", I1), "is instance i-0fed"),
        # a researcher (or any principal but an instance role's session)
        (_caller("alice", role="researcher"), _record("job-a", I1), ("job-a", 1),
         ("job-a", I1), "not a respot instance"),
        # the instance's attempt is over (interrupted, replaced)
        (_caller(I1), _record("job-a", I1, ended=True), ("job-a", 1), ("job-a", I1),
         "not a live attempt"),
        # an instance respot never linked to any job
        (_caller(I1), _record("job-a", I1), None, ("job-a", I1), "not launched for job"),
    ],
)  # fmt: skip
def test_anyone_but_a_live_instance_of_the_job_is_refused(
    caller: Caller, record: JobRecord, owner: Any, asked: tuple[str, str], reason: str
) -> None:
    broker = _broker(caller, record, owner)
    with pytest.raises(CredentialsRefusedError, match=reason):
        broker.vend(_request(*asked), "req-1")
    assert broker.sts.calls == []  # nothing assumed


def test_a_request_that_is_not_one_is_refused_before_any_identity_check() -> None:
    broker = _broker(_caller(I1), _record("job-a", I1), ("job-a", 1))
    for text in (
        "{}",
        '{"command": "job-credentials", "job_id": "../x"}',  # hostile-path
        "not json",
    ):
        with pytest.raises(CredentialsRefusedError, match="not a credentials request"):
            broker.vend(text, "req-1")
    assert broker.verifier.seen == []  # type: ignore[attr-defined]


def test_the_jobs_own_secrets_join_the_session_policy() -> None:
    arn = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:respot/jobs/wandb-AbCdEf"
    broker = _broker(_caller(I1), _record("job-a", I1, secrets={"WANDB": arn}), ("job-a", 1))
    broker.vend(_request("job-a", I1), "req-1")
    policy = json.loads(broker.sts.calls[0]["Policy"])
    (secrets,) = [s for s in policy["Statement"] if s["Sid"] == "ThisJobsSecrets"]
    assert secrets["Resource"] == [arn]


def test_earlier_jobs_outputs_named_as_data_join_the_session_policy() -> None:
    data = [{"s3_uri": "s3://jobs-bucket/jobs/job-0/outputs/", "local_path": "prev"}]
    broker = _broker(_caller(I1), _record("job-a", I1, data=data), ("job-a", 1))
    broker.vend(_request("job-a", I1), "req-1")
    policy = json.loads(broker.sts.calls[0]["Policy"])
    sids = {s["Sid"]: s for s in policy["Statement"]}
    assert sids["DataFromEarlierJobs"]["Resource"] == [
        "arn:aws:s3:::jobs-bucket/jobs/job-0/outputs/*"
    ]
    assert sids["NoSubmissions"]["Effect"] == "Deny"


# ---- the agent's side (respot.credentials.vending) ---------------------------------------------


def _source(answers: list[dict[str, Any]], slept: list[float], wait: float) -> CredentialsSource:
    from botocore.credentials import Credentials

    def invoke(function: str, payload: bytes) -> dict[str, Any]:
        request = json.loads(payload)
        assert function == "Respot-credentials" and request["job_id"] == "job-a"
        assert request["proof"]["headers"]["x-respot-command"] == "job-credentials"
        return answers.pop(0)

    return CredentialsSource(
        function="Respot-credentials", job_id="job-a", instance_id=I1, region="us-east-1",
        sts_url="https://sts.us-east-1.amazonaws.com/",
        instance_credentials=Credentials("AKIAINSTANCE", "secret", "token"),
        invoke=invoke, sleep=slept.append, bind_wait_seconds=wait,
    )  # fmt: skip


def _granted(expires: datetime) -> dict[str, Any]:
    return {"access_key_id": "ASIA1", "secret_access_key": "s", "session_token": "t",
            "expiration": expires.isoformat()}  # fmt: skip


def test_the_agent_asks_again_while_its_instance_is_not_bound_then_gives_up_with_the_reason() -> (
    None
):
    slept: list[float] = []
    later = datetime.now(UTC) + timedelta(hours=1)
    source = _source([{"refused": "not launched for job job-a"}, _granted(later)], slept, 60)
    assert source.fetch()["access_key"] == "ASIA1" and len(slept) == 1
    refused = [{"refused": "not launched for job job-a"}] * 3
    with pytest.raises(JobCredentialsError, match="not launched for job"):
        _source(refused, [], 0).fetch()


def test_credentials_near_their_end_are_asked_for_again_before_use() -> None:
    soon, later = datetime.now(UTC) + timedelta(minutes=5), datetime.now(UTC) + timedelta(hours=1)
    answers = [_granted(soon), {**_granted(later), "access_key_id": "ASIA2"}]
    session = job_session(_source(answers, [], 0), "us-east-1")
    # Five minutes left is inside botocore's mandatory refresh window: the next use refreshes
    assert session.get_credentials().get_frozen_credentials().access_key == "ASIA2"
    assert answers == []
