"""`respot run --rerun JOB`: launch a recorded job again, with the very same code.

The new job gets the old submission's spec (with optional `--set` overrides) and the same
code artifact: the zip in S3 is copied under the new job's prefix, so its SHA-256 is the
one recorded (nothing is re-packaged from the laptop, which may have moved on). Provenance
is the original's (the code is the same) with `rerun_of` naming the job it repeats. An
absolute deadline is moved by the time since the original submission, so the rerun gets
the same time to finish.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from respot.client.deployment import Deployment
from respot.client.handle import JobHandle
from respot.exceptions import JobNotFoundError, SpecError
from respot.spec.preflight import preflight
from respot.spec.training import validate_spec
from respot.storage import layout
from respot.wire.messages import (
    REDACTED,
    CodeArtifact,
    JobSubmission,
    Provenance,
    new_job_id,
)


def _split_uri(uri: str) -> tuple[str, str]:
    rest = uri.removeprefix("s3://")
    bucket, _, key = rest.partition("/")
    return bucket, key


def original_submission(deployment: Deployment, session: Any, job_id: str) -> JobSubmission:
    """The submission of `job_id`: from its record, else from `jobs/<job>/submission.json`."""
    record = JobHandle(job_id, deployment, session).record()
    if record is not None:
        return record.submission
    s3 = deployment.client("s3", session)
    try:
        body = s3.get_object(Bucket=deployment.bucket, Key=layout.submission_key(job_id))["Body"]
    except Exception as exc:
        raise JobNotFoundError(
            f"job {job_id!r} is not known to this deployment (no record, no submission in S3); "
            "`respot ls` lists the jobs it knows"
        ) from exc
    return JobSubmission.model_validate_json(body.read())


def rerun(
    job_id: str,
    *,
    deployment: Deployment,
    session: Any = None,
    overrides: list[str] | None = None,
    now: datetime | None = None,
) -> JobHandle:
    """Submit `job_id` again; returns the new job's handle."""
    from respot.spec.jobfile import JobFileError, apply_override, locate, parse_override

    now = now or datetime.now(UTC)
    old = original_submission(deployment, session, job_id)
    data = old.spec.model_dump(mode="json", exclude_none=True)
    if old.spec.deadline is not None:
        data["deadline"] = (old.spec.deadline + (now - old.submitted_at)).isoformat()
    parsed = [parse_override(o) for o in overrides or []]
    for override in parsed:
        apply_override(data, override)
    try:
        spec = validate_spec(data)
    except SpecError as exc:
        raise JobFileError(
            locate(exc.problems, name=f"job {job_id}", data=data, lines={}, overrides=parsed)
        ) from None
    # The code comes from S3, not from source_dir: only the clock-dependent checks apply.
    problems = preflight(spec.model_copy(update={"source_dir": None}), now)
    problems += [
        f"environment.{name}: its value is not stored where researchers can read it; "
        f"pass it again with --set environment.{name}=VALUE"
        for name, value in spec.environment.items()
        if value == REDACTED
    ]
    if problems:
        raise SpecError(problems)

    new_id = new_job_id(spec.name, now)
    handle = JobHandle(new_id, deployment, session)
    code = None
    if old.code is not None:
        bucket, key = _split_uri(old.code.s3_uri)
        new_key = layout.code_key(new_id, old.code.sha256)
        handle._client("s3").copy_object(
            Bucket=deployment.bucket,
            Key=new_key,
            CopySource={"Bucket": bucket, "Key": key},
            ChecksumAlgorithm="SHA256",
        )
        code = CodeArtifact(
            s3_uri=f"s3://{deployment.bucket}/{new_key}",
            sha256=old.code.sha256,
            size_bytes=old.code.size_bytes,
        )
    provenance = (old.provenance or Provenance()).model_copy(update={"rerun_of": job_id})
    submission = JobSubmission(
        job_id=new_id,
        spec=spec,
        code=code,
        provenance=provenance,
        submitted_at=now,
    )
    handle.publish(submission)
    return handle
