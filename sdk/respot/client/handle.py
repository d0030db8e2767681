"""The researcher's entry points: `run(spec)` and the `JobHandle` it returns.

`run` validates everything on the laptop first (the spec, the deadline, the code directory,
the message size), then uploads the code and publishes one message to the jobs topic.
Nothing is uploaded or published if any check fails.
"""

from __future__ import annotations

import getpass
import hashlib
import importlib.metadata
import io
import os
import platform
import socket
import subprocess
import time
import zipfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from respot.client.deployment import Deployment, discover
from respot.client.status import JobStatus
from respot.core.job import JobRecord, TimelineEntry
from respot.credentials.policy import secrets_problem
from respot.exceptions import DuplicateJobError, JobNotFinishedError, JobNotFoundError, SpecError
from respot.spec.jobid import InvalidJobIdError, check_job_id, is_job_id, is_trial_job_id
from respot.spec.preflight import preflight
from respot.spec.training import TrainingEnvVar, validate_spec
from respot.storage import layout
from respot.wire.messages import (
    CancelCommand,
    CodeArtifact,
    JobSubmission,
    Provenance,
    encode,
    new_job_id,
)

if TYPE_CHECKING:
    from respot.client.pull import PullResult

MAX_CODE_BYTES = 512 * 1024 * 1024
CODE_EXCLUDES = frozenset(
    {
        ".git",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        "node_modules",
        ".tox",
        ".eggs",
        "cdk.out",
    }
)
TRACKED_PACKAGES = ("respot", "torch", "numpy", "scikit-learn", "transformers", "jax", "pydantic")


class JobHandle:
    """A submitted job: ask how it is, wait for it, or cancel it."""

    def __init__(self, job_id: str, deployment: Deployment, session: Any = None) -> None:
        self.job_id = check_job_id(job_id)
        self.deployment = deployment
        self._session = session
        self._clients: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"JobHandle({self.job_id!r})"

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.deployment.client(service, self._session)
        return self._clients[service]

    def record(self) -> JobRecord | None:
        """The full job record, or None while the submission is still on its way."""
        from respot.aws.jobs import JobTable

        return JobTable(self.deployment.table_name, self._client("dynamodb")).get(self.job_id)

    def status(self) -> JobStatus:
        """The job's state, progress and counts right now."""
        rec = self.record()
        if rec is None:
            return JobStatus(self.job_id, "SUBMITTED", None, None, 0, 0, None, None)
        return JobStatus(
            job_id=self.job_id,
            state=rec.state.value,
            step=rec.progress.step,
            total_steps=rec.progress.total_steps,
            interruptions=rec.interruptions,
            attempts=len(rec.attempts),
            reason=rec.reason,
            record=rec,
        )

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll_seconds: float = 2.0,
        on_event: Callable[[TimelineEntry], None] | None = None,
        on_status: Callable[[JobStatus], None] | None = None,
        show_progress: bool = False,
    ) -> JobStatus:
        """Block until the job is over; `on_event` sees each new timeline entry once, in order.

        `show_progress` draws a progress bar (step of total, metrics, ETA) on a terminal, or
        prints plain progress lines elsewhere, with interruptions and resumes as they happen
        (`respot.client.progress.ProgressDisplay`).

        Raises `TimeoutError` after `timeout` seconds; a submission that never shows up in the
        table within `timeout` raises `JobNotFoundError`.
        """
        if show_progress:
            from respot.client.progress import ProgressDisplay

            with ProgressDisplay(self.job_id) as display:
                return self.wait(
                    timeout,
                    poll_seconds=poll_seconds,
                    on_event=_both(display.on_event, on_event),
                    on_status=_both(display.on_status, on_status),
                )
        deadline = None if timeout is None else time.monotonic() + timeout
        seen: set[tuple[datetime, str, str]] = set()
        while True:
            status = self.status()
            if status.record is not None and on_event is not None:
                # The timeline keeps its newest entries (old progress ones are dropped), and
                # writers on other machines have their own clocks: recognise entries by
                # what they are, not by position or by time.
                for entry in status.record.timeline:
                    identity = (entry.at, entry.kind, entry.text)
                    if identity not in seen:
                        seen.add(identity)
                        on_event(entry)
            if on_status is not None:
                on_status(status)
            if status.is_terminal:
                return status
            if deadline is not None and time.monotonic() > deadline:
                if status.record is None:
                    raise JobNotFoundError(
                        f"job {self.job_id} was published but never recorded; check the jobs "
                        "queue's dead-letter queue for the reason"
                    )
                raise TimeoutError(f"job {self.job_id} is still {status.state}")
            time.sleep(poll_seconds)

    def outputs(
        self, dest: str | Path, *, checkpoint: bool = False, show_progress: bool = False
    ) -> PullResult:
        """Download the job's outputs (and logs; `checkpoint`: its newest checkpoint) to `dest`.

        Every file is checked against the SHA-256 recorded at upload before it is written.
        Raises `JobNotFinishedError` while the job runs; a FAILED job gives what it left.
        Layout and safety rules: `respot.client.pull`.
        """
        from respot.client.pull import RichTransferProgress, pull_job

        record = self.record()
        if record is None:
            raise JobNotFinishedError(
                f"job {self.job_id} is SUBMITTED (not recorded yet): it has no outputs"
            )
        return pull_job(
            record,
            self._client("s3"),
            self.deployment.bucket,
            Path(dest),
            checkpoint=checkpoint,
            progress=RichTransferProgress() if show_progress else None,
        )

    def cancel(self, reason: str = "cancelled by user", *, checkpoint_first: bool = False) -> None:
        """Ask the control plane to cancel the job (instances are terminated, checkpoints kept).

        `checkpoint_first=True`: if the job is training, its agent first saves a checkpoint
        (a command job: its notice, docs/commands.md) and stops; the job then ends CANCELLED
        with that checkpoint kept (bounded: an agent that has not stopped within the control
        plane's heartbeat timeout is terminated). A job not training is cancelled at once.
        """
        if not isinstance(checkpoint_first, bool):
            raise TypeError(
                f"checkpoint_first must be True or False, not {checkpoint_first!r}: "
                "cancel(..., checkpoint_first=True) saves a checkpoint before the job stops"
            )
        command = CancelCommand(
            job_id=self.job_id,
            reason=reason,
            requested_at=datetime.now(UTC),
            checkpoint_first=True if checkpoint_first else None,
        )
        self.publish(command)

    def publish(self, command: JobSubmission | CancelCommand) -> None:
        """Sign an identity proof for `command` (respot.identity.proofs) and publish it."""
        from respot.identity.proofs import prove, sts_url

        session = self._session or self.deployment.session()
        proof = prove(
            command,
            session,
            region=self.deployment.region,
            url=sts_url(self.deployment.region, self.deployment.endpoint_url),
            proof_digest=self.deployment.proof_digest,
        )
        signed = command.model_copy(update={"proof": proof})
        self._client("sns").publish(
            TopicArn=self.deployment.topic_arn,
            Message=encode(signed),
            MessageAttributes={"command": {"DataType": "String", "StringValue": command.command}},
        )


def _both(first: Callable[[Any], None], second: Callable[[Any], None] | None) -> Any:
    if second is None:
        return first

    def call(item: Any) -> None:
        first(item)
        second(item)

    return call


def run(
    spec: TrainingEnvVar | dict[str, Any] | str,
    *,
    deployment: Deployment | None = None,
    session: Any = None,
    provenance: Provenance | None = None,
    job_id: str | None = None,
) -> JobHandle:
    """Submit a training job. Everything is checked before anything is uploaded or published.

    The deployment is `deployment` if given, else the local runtime if RESPOT_LOCAL is set
    (`respot local up` in another shell), else the one `discover()` finds.
    """
    env = validate_spec(spec)
    now = datetime.now(UTC)
    problems = preflight(env, now)
    if job_id is not None:
        try:
            check_job_id(job_id)
        except InvalidJobIdError as exc:
            problems.append(f"job_id: {exc}")
        else:
            if is_trial_job_id(job_id):
                problems.append(
                    f"job_id: {job_id!r} has the shape reserved for sweep trials "
                    "('<sweep>-t<number>-<10 hex>'); choose another, or leave it out"
                )
    # What the job's credentials could hold (respot.credentials): judged with every data key
    # under jobs/, whatever its bucket, so the laptop errs on the side of saying so; for an id
    # refused above, a 40-character stand-in (the generated ids' length).
    sized_for = job_id if job_id is not None and is_job_id(job_id) else "j-" + "0" * 38
    reads = [d.key for d in env.data if d.key.startswith("jobs/")]
    if why := secrets_problem(sized_for, list(env.secrets.values()), reads):
        problems.append(why)
    if problems:
        raise SpecError(problems)
    job_id = job_id or new_job_id(env.name, now)
    code_bytes = package_code(Path(env.source_dir)) if env.source_dir else None
    if deployment is None:
        from respot.client.localstate import connect_local, local_requested

        if session is None and local_requested(False):
            # RESPOT_LOCAL=1: the runtime `respot local up` runs in another shell, as the CLI.
            deployment, session = connect_local()
        else:
            deployment = discover(session)
    from respot.core.placement import disallowed_instance_types
    from respot.spec.reach import unreachable

    problem = disallowed_instance_types(env.instance_types, deployment.instance_types or ())
    # The deployment says which types it allows, and what its instances may read: refuse here.
    refused = ([problem] if problem is not None else []) + unreachable(env, deployment)
    if refused:
        raise SpecError(refused)
    code = None
    if code_bytes is not None:
        sha = hashlib.sha256(code_bytes).hexdigest()
        code = CodeArtifact(
            s3_uri=f"s3://{deployment.bucket}/{layout.code_key(job_id, sha)}",
            sha256=sha,
            size_bytes=len(code_bytes),
        )
    submission = JobSubmission(
        job_id=job_id,
        spec=env,
        code=code,
        provenance=provenance or capture_provenance(env),
        submitted_at=now,
    )
    encode(submission)  # refuses an oversize message before anything is spent
    handle = JobHandle(job_id, deployment, session)
    if code_bytes is not None and code is not None:
        _put_code(handle._client("s3"), deployment.bucket, job_id, code.sha256, code_bytes)
    handle.publish(submission)
    return handle


def _put_code(s3: Any, bucket: str, job_id: str, sha256: str, data: bytes) -> None:
    """Upload the code zip create-only: an object already at that key is never replaced.

    The key names the content's SHA-256, so an object already there is left as it is when it
    holds these bytes (our own earlier try); one with other bytes (planted under this job id
    before us) is refused here, before anything is published: the job could never run it.
    """
    from botocore.exceptions import ClientError

    key = layout.code_key(job_id, sha256)
    try:
        s3.put_object(
            Bucket=bucket, Key=key, Body=data, ChecksumAlgorithm="SHA256", IfNoneMatch="*"
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "412"):
            raise
        there = s3.get_object(Bucket=bucket, Key=key)["Body"].read(len(data) + 1)
        if hashlib.sha256(there).hexdigest() != sha256:
            raise DuplicateJobError(
                f"job id {job_id!r}: s3://{bucket}/{key} already holds other bytes than your "
                "code (someone uploaded under this job id first); choose another job id"
            ) from None


def _walk(root: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in CODE_EXCLUDES)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")):
                continue
            yield Path(dirpath) / name


def package_code(root: Path) -> bytes:
    """A deterministic zip of `root` (same files -> same bytes), without caches and VCS data."""
    buffer = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in _walk(root):
            if path.is_symlink() and not path.resolve().is_relative_to(root.resolve()):
                continue  # a link out of the directory would ship someone else's files
            rel = path.relative_to(root).as_posix()
            data = path.read_bytes()
            total += len(data)
            if total > MAX_CODE_BYTES:
                raise SpecError(
                    [
                        f"source_dir: more than {MAX_CODE_BYTES // 2**20} MiB of files; keep data "
                        "out of it and use `data` sources in S3 instead"
                    ]
                )
            info = zipfile.ZipInfo(rel, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(  # noqa: S603 - fixed argv, no shell
            ["git", *args],  # noqa: S607 - git from PATH is what the researcher uses
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def capture_provenance(spec: TrainingEnvVar) -> Provenance:
    """What is needed to reproduce the run: code version, packages, who and where."""
    root = Path(spec.source_dir) if spec.source_dir else Path.cwd()
    commit = _git(["rev-parse", "HEAD"], root)
    dirty = None
    if commit is not None:
        status = _git(["status", "--porcelain", "--", "."], root)
        dirty = bool(status) if status is not None else None
    packages = {}
    for name in TRACKED_PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return Provenance(
        git_commit=commit,
        git_dirty=dirty,
        git_remote=_git(["config", "--get", "remote.origin.url"], root) if commit else None,
        python_version=platform.python_version(),
        respot_version=packages.get("respot"),
        packages=packages,
        host=socket.gethostname(),
        user=_user(),
        # A pinned image names its digest; a tag alone can move, so it is not recorded as one.
        image_digest=spec.image.split("@", 1)[1]
        if spec.image and "@sha256:" in spec.image
        else None,
    )


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
