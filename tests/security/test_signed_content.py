"""What an identity proof's digest covers: the message as it was sent, not our model of it.

The platform team upgrades the stack; researchers' laptops keep last month's SDK. A control
plane whose `TrainingEnvVar` gained a field with a default (or whose pydantic writes a float
or a time another way) must still accept their proofs, and must still refuse any change to
what they signed: a value, a key added or taken away, a `null` nobody wrote, a key given
twice. Every case goes through the real commands handler; the signatures are real SigV4,
checked by the emulator's STS.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import TypeAdapter

from lambdas import commands
from respot.aws.ec2events import sns_envelope
from respot.client.handle import JobHandle
from respot.identity.proofs import (
    CANONICAL_DIGEST,
    DIGEST_HEADER,
    MalformedMessageError,
    command_digest,
    content_digest,
    legacy_command_digest,
    legacy_digest,
    read_message,
    sign_proof,
    signed_content,
    sts_url,
)
from respot.spec.training import TrainingEnvVar
from respot.wire.messages import COMMAND_ADAPTER, IdentityProof, JobSubmission, encode
from tests.handlers.test_handlers import CONTEXT, Env
from tests.security.test_hostile_handlers import reasons
from tests.security.test_identity import REGION, Person, person
from tests.security.test_ownership import verified

__all__ = ["verified"]  # the fixture

# Fields today's TrainingEnvVar has with a default that an older SDK's model did not know.
NEWER_FIELDS = ("warm_start", "checkpoint_keep")


def submission() -> JobSubmission:
    return JobSubmission(
        job_id=f"job-{secrets.token_hex(4)}",
        spec=TrainingEnvVar(
            name="mine",
            entry_point="a.b:C",
            hyperparameters={"lr": 1e-05, "layers": [64, 32], "note": "é ü"},
        ),
        submitted_at=datetime.now(UTC),
    )


def older_sdk_object(sub: JobSubmission) -> dict[str, Any]:
    """`sub` as an SDK whose model predates NEWER_FIELDS writes it (None fields left out)."""
    obj = sub.model_dump(mode="json", exclude_none=True)
    for name in NEWER_FIELDS:
        del obj["spec"][name]
    return obj


def proof_for(who: Person, endpoint: str, job_id: str, digest: str) -> dict[str, Any]:
    proof = sign_proof(
        who.session.get_credentials(),
        region=REGION,
        url=sts_url(REGION, endpoint),
        job_id=job_id,
        command="submit",
        digest=digest,
    )
    return proof.model_dump(mode="json")


def deliver(env: Env, text: str) -> None:
    """The SQS body SNS makes of the published `text` (a fresh SNS message id), handled."""
    envelope = json.loads(env.sns_envelope(text, "submit"))
    envelope["MessageId"] = secrets.token_hex(8)
    assert commands.handler(env.sqs_event(json.dumps(envelope)), CONTEXT) == {
        "batchItemFailures": []
    }


def test_a_proof_from_an_sdk_with_an_older_model_is_accepted(
    verified: Env, moto_endpoint: str
) -> None:
    alice = person(moto_endpoint, "alice")
    sub = submission()
    sent = older_sdk_object(sub)
    sent["submitted_at"] = sub.submitted_at.isoformat()  # "+00:00", where pydantic writes "Z"
    digest = content_digest(sent)
    # The rule before: the digest of our model's re-serialisation. It differs (the defaults
    # the older SDK never sent, the time's spelling), so that rule refused this proof.
    assert command_digest(JobSubmission.model_validate(sent)) != digest
    # Written by Python's json (1e-05), not pydantic (0.00001): spelling is not content.
    deliver(
        verified, json.dumps({**sent, "proof": proof_for(alice, moto_endpoint, sub.job_id, digest)})
    )
    assert reasons(verified) == []
    record = verified.control.jobs.get(sub.job_id)
    assert record is not None and record.submission.submitted_by == alice.arn
    assert record.submission.spec.warm_start is True  # our default fills what it did not send
    assert record.submission.spec.hyperparameters == {
        "lr": 1e-05,
        "layers": [64, 32],
        "note": "é ü",
    }


def test_a_proof_from_an_sdk_before_the_canonical_digest_is_accepted(
    verified: Env, moto_endpoint: str
) -> None:
    # Such an SDK hashed its model's compact JSON (pydantic's, field order, 0.00001, raw
    # UTF-8) and sent the same JSON with the proof as its last field (`encode`).
    alice = person(moto_endpoint, "alice")
    sub = submission()
    signed = TypeAdapter(dict).dump_json(older_sdk_object(sub)).decode()
    digest = hashlib.sha256(signed.encode()).hexdigest()
    assert digest != content_digest(json.loads(signed))  # only the legacy rule can accept it
    proof = json.dumps(proof_for(alice, moto_endpoint, sub.job_id, digest), separators=(",", ":"))
    deliver(verified, signed[:-1] + ',"proof":' + proof + "}")
    assert reasons(verified) == []
    record = verified.control.jobs.get(sub.job_id)
    assert record is not None and record.submission.submitted_by == alice.arn
    # ... and it binds as tightly: one value changed in that text is refused.
    sub = submission()
    signed = TypeAdapter(dict).dump_json(older_sdk_object(sub)).decode()
    digest = hashlib.sha256(signed.encode()).hexdigest()
    proof = json.dumps(proof_for(alice, moto_endpoint, sub.job_id, digest), separators=(",", ":"))
    tampered = signed.replace('"seed":0', '"seed":7')
    assert tampered != signed
    deliver(verified, tampered[:-1] + ',"proof":' + proof + "}")
    (reason,) = reasons(verified)
    assert "signed for another content" in reason
    assert verified.control.jobs.get(sub.job_id) is None


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return change


def _drop(path: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    def change(obj: dict[str, Any]) -> None:
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]

    return change


# Each change to a signed message, and the reason it is refused with.
TAMPERING = {
    "a value changed": (
        _set(("spec", "seed"), 7),
        "identity: the proof was signed for another content",
    ),
    "a nested value changed": (
        _set(("spec", "hyperparameters", "lr"), 0.1),
        "signed for another content",
    ),
    "a key added where any key is valid": (
        _set(("spec", "hyperparameters", "extra"), 1),
        "signed for another content",
    ),
    "an unknown field added": (_set(("spec", "evil"), 1), "spec.evil: unknown field"),
    "an unknown top-level field added": (_set(("evil",), 1), "evil: unknown field"),
    "a null nobody signed": (_set(("code",), None), "signed for another content"),
    "a signed field taken away (its value is our default)": (
        _drop(("spec", "seed")),
        "signed for another content",
    ),
    "the claimed submitter": (_set(("submitted_by",), "arn:aws:iam::123456789012:user/x"), ""),
}


@pytest.mark.parametrize("case", TAMPERING)
def test_a_changed_message_is_refused_with_its_reason(
    verified: Env, moto_endpoint: str, case: str
) -> None:
    change, reason = TAMPERING[case]
    alice = person(moto_endpoint, "alice")
    sub = submission()
    sent = json.loads(encode(sub))
    proof = proof_for(alice, moto_endpoint, sub.job_id, content_digest(sent))
    change(sent)
    deliver(verified, json.dumps({**sent, "proof": proof}))
    record = verified.control.jobs.get(sub.job_id)
    if not reason:  # not signed: STS's answer replaces it
        assert reasons(verified) == []
        assert record is not None and record.submission.submitted_by == alice.arn
        return
    (said,) = reasons(verified)
    assert reason in said, said
    assert record is None and verified.instances(sub.job_id) == []


@pytest.mark.parametrize(
    ("spelling", "reason"),
    [
        # JSON parsers disagree on which of the two they keep: the digest could cover one
        # and the job run the other.
        ('"seed":0,"seed":7', "gives the key 'seed' twice in one object"),
        ('"seed":7,"seed":0', "gives the key 'seed' twice in one object"),
        ('"seed":NaN', "holds NaN, which is not a JSON number"),
        ('"seed":1e999', "holds the number 1e999, beyond a double"),
    ],
)
def test_an_ambiguous_message_is_refused_before_its_proof_is_read(
    verified: Env, moto_endpoint: str, spelling: str, reason: str
) -> None:
    alice = person(moto_endpoint, "alice")
    sub = submission()
    sent = json.loads(encode(sub))
    text = json.dumps(
        {**sent, "proof": proof_for(alice, moto_endpoint, sub.job_id, content_digest(sent))},
        separators=(",", ":"),
    )
    assert text.count('"seed":0') == 1
    deliver(verified, text.replace('"seed":0', spelling))
    (said,) = reasons(verified)
    assert reason in said, said
    assert verified.control.jobs.get(sub.job_id) is None


def test_the_signed_form_is_of_values_not_spelling() -> None:
    a = read_message('{"b": [1, 2.5e-3, "\\u00e9"], "a": {"y": null, "x": 1e-05}, "proof": 1}')
    b = read_message('{"a":{"x":0.00001,"y":null},"b":[1,0.0025,"é"],"submitted_by":"me"}')
    assert signed_content(a) == signed_content(b)
    assert signed_content(a) == b'{"a":{"x":1e-05,"y":null},"b":[1,0.0025,"\\u00e9"]}'
    # null is a value, not an absent key; 1 and 1.0 are different values
    assert content_digest({"a": None}) != content_digest({})
    assert content_digest({"a": 1}) != content_digest({"a": 1.0})


def test_a_message_is_one_json_object() -> None:
    for text, reason in [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"spec": {"a": {"k": 1, "k": 1}}}', "gives the key 'k' twice"),
        ('{"x": -Infinity}', "holds -Infinity"),
    ]:
        with pytest.raises(MalformedMessageError, match=reason):
            read_message(text)


def test_the_legacy_digest_is_what_those_sdks_signed() -> None:
    proof = IdentityProof(url="https://sts.example/", body="b", headers={"a": "b"})
    sub = submission().model_copy(update={"submitted_by": "arn:aws:iam::1:user/x", "proof": proof})
    before = hashlib.sha256(
        sub.model_dump_json(
            exclude={"proof", "submitted_by", "requested_by"}, exclude_none=True
        ).encode()
    ).hexdigest()
    assert legacy_digest(encode(sub)) == before
    assert legacy_digest("[1]") is None and legacy_digest('{"a":1') is None
    assert legacy_digest('{"a":1 "b":2}') is None and legacy_digest('{"a":1,}') is None


@pytest.mark.parametrize("said", [CANONICAL_DIGEST, None])
def test_the_sdk_signs_the_digest_its_stack_checks(
    verified: Env, moto_endpoint: str, said: str | None
) -> None:
    # A stack before the canonical digest says nothing in its deployment parameter and
    # checks the legacy digest of its own model; a researcher whose SDK is newer than the
    # stack must still get in. Published by the SDK itself, through SNS to the queue.
    alice = person(moto_endpoint, "alice")
    sub = submission()
    deployment = dataclasses.replace(verified.local.deployment(), proof_digest=said)
    JobHandle(sub.job_id, deployment, session=alice.session).publish(sub)
    sqs, url = verified.clients["sqs"], verified.local.queue_urls["commands"]
    (message,) = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=2)["Messages"]
    text, _ = sns_envelope(message["Body"])
    signed = json.loads(text)["proof"]["headers"][DIGEST_HEADER]
    if said == CANONICAL_DIGEST:
        assert signed == content_digest(read_message(text))
    else:  # what a stack before the canonical digest recomputes, and accepts
        assert signed == legacy_command_digest(COMMAND_ADAPTER.validate_json(text))
    assert commands.handler(verified.sqs_event(message["Body"]), CONTEXT) == {
        "batchItemFailures": []
    }
    assert reasons(verified) == []
    record = verified.control.jobs.get(sub.job_id)
    assert record is not None and record.submission.submitted_by == alice.arn
