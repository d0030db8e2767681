"""The researcher's side of sweeps: `sweep(spec)` and the `SweepHandle` it returns.

`sweep` checks everything on the laptop (the search space, the job, the code, the message
size), uploads the code once and publishes one `sweep` command on the jobs topic. From then
on the control plane runs the study; the laptop can close. `SweepHandle` reads the sweep's
record and its study from the job table (`status`, `wait`, `study`, `plot`) and can stop it.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from respot.client.deployment import Deployment, discover
from respot.exceptions import SpecError
from respot.storage import layout
from respot.sweep.exceptions import SweepNotFoundError
from respot.sweep.model import SweepRecord, SweepStopCommand, SweepSubmission, Trial
from respot.sweep.spec import SweepSpec, validate_sweep
from respot.wire.messages import CodeArtifact, encode, new_job_id

if TYPE_CHECKING:
    import optuna


@dataclass(frozen=True)
class SweepStatus:
    """A sweep at one moment: its state, its trials and the best one."""

    sweep_id: str
    state: str
    trials: list[Trial]
    best: Trial | None
    n_trials: int
    record: SweepRecord | None

    @property
    def is_terminal(self) -> bool:
        """True once the sweep has ended (completed or stopped)."""
        return self.state in ("COMPLETED", "STOPPED")


class SweepHandle:
    """A submitted sweep: look at it, wait for it, open its study, or stop it."""

    def __init__(self, sweep_id: str, deployment: Deployment, session: Any = None) -> None:
        self.sweep_id = sweep_id
        self.deployment = deployment
        self._session = session
        self._clients: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"SweepHandle({self.sweep_id!r})"

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.deployment.client(service, self._session)
        return self._clients[service]

    def _table(self) -> Any:
        from respot.sweep.table import SweepTable

        return SweepTable(self.deployment.table_name, self._client("dynamodb"))

    def record(self) -> SweepRecord | None:
        """The sweep's record, or None while its command is still on its way."""
        record: SweepRecord | None = self._table().get(self.sweep_id)
        return record

    def status(self) -> SweepStatus:
        """The sweep's state and trials right now."""
        rec = self.record()
        if rec is None:
            return SweepStatus(self.sweep_id, "SUBMITTED", [], None, 0, None)
        return SweepStatus(
            sweep_id=self.sweep_id,
            state=rec.state.value,
            trials=list(rec.trials),
            best=rec.best(),
            n_trials=rec.spec.n_trials,
            record=rec,
        )

    def wait(
        self,
        timeout: float | None = None,
        *,
        poll_seconds: float = 2.0,
        on_change: Callable[[SweepStatus | None, SweepStatus], None] | None = None,
    ) -> SweepStatus:
        """Block until the sweep has ended; `TimeoutError` after `timeout` seconds.

        `on_change(before, now)` is called whenever the sweep's state or a trial's changed
        since the last poll (`before` is None the first time): `respot sweep start --wait`
        prints a line per change from it.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        before: SweepStatus | None = None
        while True:
            status = self.status()
            if on_change is not None and (before is None or _moved(before, status)):
                on_change(before, status)
            before = status
            if status.is_terminal:
                return status
            if deadline is not None and time.monotonic() > deadline:
                if status.record is None:
                    raise SweepNotFoundError(
                        f"sweep {self.sweep_id} was published but never recorded; check the "
                        "commands queue's dead-letter queue for the reason"
                    )
                raise TimeoutError(f"sweep {self.sweep_id} is still {status.state}")
            time.sleep(poll_seconds)

    def study(self) -> optuna.Study:
        """The sweep's Optuna study, read from the control plane's storage (for analysis)."""
        from respot.sweep import study as studies

        record = self.record()
        if record is None:
            raise SweepNotFoundError(f"no sweep {self.sweep_id!r} in this deployment")
        return studies.open_study(self._table().journal(self.sweep_id), record.spec)

    def stop(self, reason: str = "stopped by its owner") -> None:
        """Ask the control plane to stop the sweep: no new trials, running ones cancelled."""
        command = SweepStopCommand(
            sweep_id=self.sweep_id, reason=reason, requested_at=datetime.now(UTC)
        )
        self.publish(command)

    def publish(self, command: SweepSubmission | SweepStopCommand) -> None:
        """Sign an identity proof for `command` (respot.identity.proofs) and publish it."""
        from respot.identity.proofs import digest_to_sign, sign_proof, sts_url

        session = self._session or self.deployment.session()
        credentials = session.get_credentials()
        if credentials is None:
            from respot.identity.proofs import ProofError

            raise ProofError(
                "no AWS credentials found to prove who you are; log in (e.g. `aws sso login`) "
                "or set AWS_PROFILE"
            )
        proof = sign_proof(
            credentials,
            region=self.deployment.region or session.region_name or "us-east-1",
            url=sts_url(self.deployment.region, self.deployment.endpoint_url),
            job_id=self.sweep_id,
            command=command.command,
            digest=digest_to_sign(command, self.deployment.proof_digest),
        )
        signed = command.model_copy(update={"proof": proof})
        self._client("sns").publish(
            TopicArn=self.deployment.topic_arn,
            Message=encode(signed),
            MessageAttributes={"command": {"DataType": "String", "StringValue": command.command}},
        )


def _moved(before: SweepStatus, now: SweepStatus) -> bool:
    """True if the sweep's state, or any trial's state, changed between two polls."""

    def states(status: SweepStatus) -> tuple[str, list[tuple[int, str]]]:
        return status.state, [(t.number, t.state.value) for t in status.trials]

    return states(before) != states(now)


def load_sweep_file(path: Path) -> SweepSpec:
    """Read and check a sweep file (YAML or JSON); `SpecError` names each problem."""
    import yaml

    from respot.spec.yamlguard import YamlLimitError, guarded_yaml

    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError([f"{path}: cannot read the sweep file: {exc.strerror or exc}"]) from exc
    try:
        data = guarded_yaml(text, what=str(path))
    except YamlLimitError as exc:
        raise SpecError([str(exc)]) from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise SpecError([f"{path}: not valid YAML: {str(exc).splitlines()[0]}"]) from exc
    if not isinstance(data, dict):
        raise SpecError([f"{path}: a sweep file is a mapping of fields (name, metric, ...)"])
    spec = validate_sweep(data)
    if spec.job.source_dir and not Path(spec.job.source_dir).is_absolute():
        # A relative source_dir is relative to the sweep file, as in job files.
        source = (path.parent / spec.job.source_dir).resolve()
        spec = spec.model_copy(
            update={"job": spec.job.model_copy(update={"source_dir": str(source)})}
        )
    return spec


def sweep(
    spec: SweepSpec | dict[str, Any] | str,
    *,
    deployment: Deployment | None = None,
    session: Any = None,
    sweep_id: str | None = None,
) -> SweepHandle:
    """Start a sweep: Optuna trials run as respot jobs, driven by the control plane.

    Everything is checked before anything is uploaded or published. The deployment is
    `deployment` if given, else the local runtime if RESPOT_LOCAL is set, else the one
    `discover()` finds.
    """
    from respot.client.handle import capture_provenance, package_code
    from respot.spec.preflight import preflight

    checked = validate_sweep(spec)
    now = datetime.now(UTC)
    problems = [f"job.{p}" for p in preflight(checked.job, now)]
    if problems:
        raise SpecError(problems)
    sweep_id = sweep_id or new_job_id(checked.name, now)
    code_bytes = package_code(Path(checked.job.source_dir)) if checked.job.source_dir else None
    if deployment is None:
        from respot.client.localstate import connect_local, local_requested

        if session is None and local_requested(False):
            deployment, session = connect_local()
        else:
            deployment = discover(session)
    from respot.spec.reach import unreachable

    # Every trial would be launched and fail at setup (the commands function refuses it too).
    refused = unreachable(checked.job, deployment, field="job.")
    if refused:
        raise SpecError(refused)
    code = None
    if code_bytes is not None:
        sha = hashlib.sha256(code_bytes).hexdigest()
        code = CodeArtifact(
            s3_uri=f"s3://{deployment.bucket}/{layout.code_key(sweep_id, sha)}",
            sha256=sha,
            size_bytes=len(code_bytes),
        )
    submission = SweepSubmission(
        sweep_id=sweep_id,
        spec=checked,
        code=code,
        provenance=capture_provenance(checked.job),
        submitted_at=now,
    )
    encode(submission)  # refuses an oversize message before anything is spent
    handle = SweepHandle(sweep_id, deployment, session)
    if code_bytes is not None and code is not None:
        handle._client("s3").put_object(
            Bucket=deployment.bucket,
            Key=layout.code_key(sweep_id, code.sha256),
            Body=code_bytes,
            ChecksumAlgorithm="SHA256",
        )
    handle.publish(submission)
    return handle
