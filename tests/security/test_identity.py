"""Verified identity without shared secrets, executed against the emulator's STS.

moto's STS names the caller from the access key in the Authorization header (an IAM user
created in the emulator answers as that user), and, with IAM auth switched on, checks the
SigV4 signature as STS does. Both are used here: no stub stands in for STS.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import requests

from respot.identity.proofs import Caller, ProofError, Received, command_digest, prove, sts_url
from respot.identity.verify import DynamoProofLedger, Verifier, principal_matches
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import CancelCommand, IdentityProof, JobSubmission, encode

REGION = "us-east-1"


@dataclass
class Person:
    arn: str
    session: Any


def person(endpoint: str, name: str) -> Person:
    """An IAM user in the emulator with its own access key, and a boto3 session of it."""
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",  # the emulator's administrator, before auth is on
        aws_secret_access_key="testing",
    )
    user = f"{name}-{secrets.token_hex(3)}"
    arn = iam.create_user(UserName=user)["User"]["Arn"]
    key = iam.create_access_key(UserName=user)["AccessKey"]
    session = boto3.session.Session(
        aws_access_key_id=key["AccessKeyId"],
        aws_secret_access_key=key["SecretAccessKey"],
        region_name=REGION,
    )
    return Person(arn, session)


class MemoryLedger:
    def __init__(self) -> None:
        self.used: dict[str, str] = {}
        self.callers: dict[tuple[str, str], Caller] = {}

    def use(
        self,
        signature: str,
        message_id: str,
        expires_at: datetime,
        caller: Caller | None = None,
        fingerprint: str = "",
    ) -> None:
        if self.used.setdefault(signature, message_id) != message_id:
            raise ProofError("replayed identity proof")
        if caller is not None:
            self.callers[(signature, message_id, fingerprint)] = caller

    def recall(self, signature: str, message_id: str, fingerprint: str) -> Caller | None:
        return self.callers.get((signature, message_id, fingerprint))


def cancel_of(job_id: str) -> CancelCommand:
    return CancelCommand(job_id=job_id, requested_at=datetime.now(UTC))


def signed(command: Any, who: Person, endpoint: str) -> Any:
    proof = prove(command, who.session, region=REGION, url=sts_url(REGION, endpoint))
    return command.model_copy(update={"proof": proof})


@pytest.fixture
def iam_auth(moto_endpoint: str, aws_credentials: None) -> Iterator[tuple[Person, Person]]:
    """alice and mallory, then the emulator checks every signature until the test ends."""
    alice, mallory = person(moto_endpoint, "alice"), person(moto_endpoint, "mallory")
    requests.post(f"{moto_endpoint}/moto-api/reset-auth", data=b"0", timeout=5)
    try:
        yield alice, mallory
    finally:
        requests.post(f"{moto_endpoint}/moto-api/reset-auth", data=b"1000000000", timeout=5)


def verifier(endpoint: str, **kwargs: Any) -> Verifier:
    return Verifier(sts_url=sts_url(REGION, endpoint), region=REGION, **kwargs)


def verify(check: Verifier, command: Any, message_id: str) -> Caller:
    """`check.verify` of `command` as it arrives, published as the SDK publishes it."""
    return check.verify(command, message_id, received=Received(encode(command)))


def test_a_genuine_proof_names_the_signer(
    moto_endpoint: str, iam_auth: tuple[Person, Person]
) -> None:
    alice, _ = iam_auth
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    caller = verify(verifier(moto_endpoint, ledger=MemoryLedger()), command, "m1")
    assert caller.arn == alice.arn


def test_a_forged_signature_is_refused_by_sts(
    moto_endpoint: str, iam_auth: tuple[Person, Person]
) -> None:
    alice, mallory = iam_auth
    command = signed(cancel_of("job-1"), mallory, moto_endpoint)
    assert command.proof is not None
    headers = dict(command.proof.headers)
    # mallory writes alice's access key id into her own signature
    alice_key = alice.session.get_credentials().access_key
    mallory_key = mallory.session.get_credentials().access_key
    headers["Authorization"] = headers["Authorization"].replace(mallory_key, alice_key)
    forged = command.model_copy(
        update={"proof": command.proof.model_copy(update={"headers": headers})}
    )
    with pytest.raises(ProofError, match="STS refused the proof: SignatureDoesNotMatch"):
        verify(verifier(moto_endpoint, ledger=MemoryLedger()), forged, "m1")


def test_one_command_published_twice_within_a_second_is_two_proofs_not_a_replay(
    moto_endpoint: str, iam_auth: tuple[Person, Person], monkeypatch: pytest.MonkeyPatch
) -> None:
    # SigV4 signs the time to the second: a retrying client (or a test) that publishes the
    # same command twice within one second used to send the same proof twice, and the
    # second was dead-lettered as a replay although it was a new message.
    import botocore.auth

    alice, _ = iam_auth
    second = datetime.now(UTC).replace(microsecond=0, tzinfo=None)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: second)
    command = cancel_of("job-1")
    first, again = signed(command, alice, moto_endpoint), signed(command, alice, moto_endpoint)
    assert first.proof.headers["X-Amz-Date"] == again.proof.headers["X-Amz-Date"]
    check = verifier(moto_endpoint, ledger=MemoryLedger())
    assert verify(check, first, "sns-message-1").arn == alice.arn
    assert verify(check, again, "sns-message-2").arn == alice.arn  # STS checked the nonce too


def test_a_nonce_is_bound_by_the_signature(
    moto_endpoint: str, iam_auth: tuple[Person, Person]
) -> None:
    alice, _ = iam_auth
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    check = verifier(moto_endpoint, ledger=MemoryLedger())
    headers = {**command.proof.headers, "x-respot-nonce": "0" * 32}  # a replay made to look new
    changed = command.model_copy(
        update={"proof": command.proof.model_copy(update={"headers": headers})}
    )
    with pytest.raises(ProofError, match="SignatureDoesNotMatch"):
        verify(check, changed, "m2")
    auth = command.proof.headers["Authorization"]
    unsigned = {**command.proof.headers, "Authorization": auth.replace(";x-respot-nonce", "")}
    dropped = command.model_copy(
        update={"proof": command.proof.model_copy(update={"headers": unsigned})}
    )
    with pytest.raises(ProofError, match="does not sign x-respot-nonce"):
        verify(check, dropped, "m3")


def test_a_made_up_signature_is_refused_by_sts(
    moto_endpoint: str, iam_auth: tuple[Person, Person]
) -> None:
    alice, _ = iam_auth
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    headers = dict(command.proof.headers)
    sig = headers["Authorization"][-64:]
    headers["Authorization"] = headers["Authorization"][:-64] + sig[::-1]
    forged = command.model_copy(
        update={"proof": command.proof.model_copy(update={"headers": headers})}
    )
    with pytest.raises(ProofError, match="SignatureDoesNotMatch"):
        verify(verifier(moto_endpoint, ledger=MemoryLedger()), forged, "m1")


def test_a_proof_for_another_job_or_command_or_content_is_refused(moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    check = verifier(moto_endpoint, ledger=MemoryLedger())
    proof = signed(cancel_of("job-a"), alice, moto_endpoint).proof
    with pytest.raises(ProofError, match="another job-id"):
        verify(check, cancel_of("job-b").model_copy(update={"proof": proof}), "m1")
    submission = JobSubmission(
        job_id="job-a",
        spec=TrainingEnvVar(name="x", entry_point="a.b:C"),
        submitted_at=datetime.now(UTC),
    )
    with pytest.raises(ProofError, match="another command"):
        verify(check, submission.model_copy(update={"proof": proof}), "m1")
    good = signed(submission, alice, moto_endpoint)
    tampered = good.model_copy(
        update={"spec": TrainingEnvVar(name="x", entry_point="a.b:C", seed=9)}
    )
    with pytest.raises(ProofError, match="another content"):
        verify(check, tampered, "m1")
    # the claimed identity is not part of what is signed: STS's answer replaces it
    claimed = good.model_copy(update={"submitted_by": "arn:aws:iam::123456789012:user/root"})
    assert verify(check, claimed, "m2").arn == alice.arn


def test_an_expired_or_future_proof_is_refused(moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    later = verifier(
        moto_endpoint,
        ledger=MemoryLedger(),
        clock=lambda: datetime.now(UTC) + timedelta(minutes=6),
    )
    with pytest.raises(ProofError, match="expired"):
        verify(later, command, "m1")
    earlier = verifier(
        moto_endpoint,
        ledger=MemoryLedger(),
        clock=lambda: datetime.now(UTC) - timedelta(minutes=3),
    )
    with pytest.raises(ProofError, match="future"):
        verify(earlier, command, "m1")


def test_a_proof_is_judged_at_its_publication_not_at_a_late_redelivery(
    moto_endpoint: str,
) -> None:
    # A command whose first delivery failed comes back after the queue's 360-s visibility
    # timeout; its SNS envelope still says when it was published, and that is when the
    # proof's age is judged.
    alice = person(moto_endpoint, "alice")
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    published = datetime.now(UTC)
    later = verifier(
        moto_endpoint, ledger=MemoryLedger(), clock=lambda: published + timedelta(minutes=6)
    )
    received = Received(encode(command))
    caller = later.verify(command, "m1", received=received, published_at=published)
    assert caller.arn == alice.arn
    with pytest.raises(ProofError, match="expired"):  # no envelope time: judged now, as before
        later.verify(command, "m2", received=received)


def test_a_proof_already_old_when_published_is_refused(moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    received = Received(encode(command))
    now = datetime.now(UTC) + timedelta(minutes=6)
    check = verifier(moto_endpoint, ledger=MemoryLedger(), clock=lambda: now)
    with pytest.raises(ProofError, match=r"expired: .* when published 3[0-9]{2} s old"):
        check.verify(command, "m1", received=received, published_at=now)  # 6 min after signing
    with pytest.raises(ProofError, match="published in the future"):
        check.verify(command, "m2", received=received, published_at=now + timedelta(minutes=5))
    with pytest.raises(ProofError, match="after the message carrying it was published"):
        check.verify(
            command, "m3", received=received, published_at=now - timedelta(minutes=30)
        )  # a claimed publication before the signature cannot make it young
    # whatever the envelope says, STS's own 15-minute bound holds for a proof never verified
    much_later = verifier(
        moto_endpoint, ledger=MemoryLedger(), clock=lambda: now + timedelta(minutes=10)
    )
    with pytest.raises(ProofError, match="STS refuses older signatures"):
        much_later.verify(command, "m4", received=received, published_at=now - timedelta(minutes=6))


def test_a_verified_proof_is_recalled_for_its_own_redelivery_only(
    moto_endpoint: str, aws_credentials: None
) -> None:
    from infra.local import cloud

    local = cloud.provision(moto_endpoint, prefix=f"t{secrets.token_hex(4)}")
    ledger = DynamoProofLedger(local.table_name, local.client("dynamodb"))
    alice = person(moto_endpoint, "alice")
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    received = Received(encode(command))
    published = datetime.now(UTC)
    assert (
        verifier(moto_endpoint, ledger=ledger)
        .verify(command, "sns-1", received=received, published_at=published)
        .arn
        == alice.arn
    )

    def no_sts(u: str, body: bytes, headers: Any, timeout: float) -> tuple[int, bytes]:
        raise AssertionError("a proof verified before is not sent to STS again")

    # the fourth delivery comes 18 minutes after the first: STS would refuse the signature
    late = verifier(
        moto_endpoint, ledger=ledger, post=no_sts, clock=lambda: published + timedelta(minutes=18)
    )
    assert late.verify(command, "sns-1", received=received, published_at=published).arn == (
        alice.arn
    )
    # the same proof in another message is a replay, never recalled, even when fresh enough
    soon = verifier(moto_endpoint, ledger=ledger, clock=lambda: published + timedelta(minutes=6))
    with pytest.raises(ProofError, match="replayed"):
        soon.verify(command, "sns-2", received=received, published_at=published)
    # a recalled caller is bound to this message's content: another job's cancel is refused
    other = command.model_copy(update={"job_id": "job-2"})
    with pytest.raises(ProofError, match="another job-id"):
        late.verify(other, "sns-1", received=Received(encode(other)), published_at=published)
    # nor is it recalled for another proof carrying the same signature: mallory signs her own
    # cancel of job-2 (its headers bound to her message), swaps in alice's signature and sends
    # it as a message with alice's message id (a body sent to the queue directly names any id)
    mallory = person(moto_endpoint, "mallory")
    theirs = signed(cancel_of("job-2"), mallory, moto_endpoint)
    assert theirs.proof is not None and command.proof is not None
    alice_signature = command.proof.headers["Authorization"].rsplit("Signature=", 1)[1]
    headers = dict(theirs.proof.headers)
    headers["Authorization"] = (
        headers["Authorization"].rsplit("Signature=", 1)[0] + f"Signature={alice_signature}"
    )
    forged = theirs.model_copy(
        update={"proof": theirs.proof.model_copy(update={"headers": headers})}
    )
    with pytest.raises(ProofError):
        late.verify(forged, "sns-1", received=Received(encode(forged)), published_at=published)


def test_a_replayed_proof_is_refused_and_a_redelivery_is_not(
    moto_endpoint: str, aws_credentials: None
) -> None:
    from infra.local import cloud

    local = cloud.provision(moto_endpoint, prefix=f"t{secrets.token_hex(4)}")
    ledger = DynamoProofLedger(local.table_name, local.client("dynamodb"))
    alice = person(moto_endpoint, "alice")
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    check = verifier(moto_endpoint, ledger=ledger)
    assert verify(check, command, "sns-message-1").arn == alice.arn
    assert verify(check, command, "sns-message-1").arn == alice.arn  # SQS redelivered it
    with pytest.raises(ProofError, match="replayed"):
        verify(check, command, "sns-message-2")  # the same proof published again
    items = local.client("dynamodb").scan(TableName=local.table_name)["Items"]
    (used,) = [i for i in items if i["pk"]["S"].startswith("PROOF#")]
    assert int(used["ttl"]["N"]) > datetime.now(UTC).timestamp()  # removed by TTL later


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://sts.us-east-1.amazonaws.com.evil.example/",
        "https://evil.example/?x=https://sts.us-east-1.amazonaws.com/",
        "https://user:pw@sts.us-east-1.amazonaws.com/",
        "https://sts.us-west-2.amazonaws.com/",
        "https://sts.us-east-1.amazonaws.com/?Action=AssumeRole",
        "https://sts.us-east-1.amazonaws.com:8443/",
    ],
)
def test_only_the_trusted_sts_endpoint_is_ever_contacted(url: str) -> None:
    posted: list[str] = []

    def post(u: str, body: bytes, headers: Any, timeout: float) -> tuple[int, bytes]:
        posted.append(u)
        return 200, b""

    check = Verifier(
        sts_url="https://sts.us-east-1.amazonaws.com/", region=REGION, ledger=None, post=post
    )
    command = cancel_of("job-1")
    proof = IdentityProof(
        url=url,
        body="Action=GetCallerIdentity&Version=2011-06-15",
        headers={"Authorization": "x"},
    )
    with pytest.raises(ProofError, match=r"not to this deployment's STS endpoint|credentials"):
        verify(check, command.model_copy(update={"proof": proof}), "m1")
    assert posted == []


def test_other_requests_and_headers_are_refused_before_sts_is_asked(moto_endpoint: str) -> None:
    alice = person(moto_endpoint, "alice")
    command = signed(cancel_of("job-1"), alice, moto_endpoint)
    check = verifier(moto_endpoint, ledger=MemoryLedger())
    proof = command.proof
    cases = {
        "not an sts:GetCallerIdentity": proof.model_copy(
            update={"body": "Action=AssumeRole&Version=2011-06-15"}
        ),
        "header 'X-Forwarded-For'": proof.model_copy(
            update={"headers": {**proof.headers, "X-Forwarded-For": "1"}}
        ),
        "no x-respot-digest": proof.model_copy(
            update={"headers": {k: v for k, v in proof.headers.items() if k != "x-respot-digest"}}
        ),
    }
    for reason, bad in cases.items():
        with pytest.raises(ProofError, match=reason):
            verify(check, command.model_copy(update={"proof": bad}), "m1")
    with pytest.raises(ProofError, match="carries no identity proof"):
        verify(check, cancel_of("job-1"), "m1")


def test_the_digest_survives_the_wire() -> None:
    submission = JobSubmission(
        job_id="job-1",
        spec=TrainingEnvVar(
            name="x",
            entry_point="a.b:C",
            deadline="+48h",
            max_runtime="90m",
            hyperparameters={"lr": 0.1, "nested": {"a": [1, 2.5, None, "s"]}},
            environment={"A": "é ü \\n"},
        ),
        submitted_at=datetime.now(UTC),
    )
    again = JobSubmission.model_validate_json(submission.model_dump_json(exclude_none=True))
    assert command_digest(again) == command_digest(submission)


def test_admin_entries_match_their_role_sessions() -> None:
    role = "arn:aws:iam::123456789012:role/RespotAdmin"
    assert principal_matches("arn:aws:sts::123456789012:assumed-role/RespotAdmin/bob", role)
    assert not principal_matches("arn:aws:sts::123456789012:assumed-role/RespotAdminX/b", role)
    assert not principal_matches("arn:aws:sts::999999999999:assumed-role/RespotAdmin/b", role)
    assert principal_matches(
        "arn:aws:iam::123456789012:user/ops", "arn:aws:iam::123456789012:user/ops"
    )
    assert not principal_matches(
        "arn:aws:iam::123456789012:user/ops2", "arn:aws:iam::123456789012:user/ops"
    )
