"""Where respot keeps a job's things in S3: one function per kind of object, one prefix per job.

jobs/<job>/submission.json              the submission, written by the commands Lambda
jobs/<job>/code/<sha256>.zip             the researcher's code, uploaded by run()
jobs/<job>/checkpoints/blobs/<sha256>    checkpoint file contents, stored once by content
jobs/<job>/checkpoints/manifests/<step>-<attempt>.json   a checkpoint; written last
jobs/<job>/handoff/<attempt>.json        attempt will write no more checkpoints
jobs/<job>/handoff/<attempt>.successor.json   its replacement is warm (warm start)
jobs/<job>/control/<attempt>.json        the control plane asks that attempt to stop
jobs/<job>/outputs/...                   what the session left in output_dir at the end
jobs/<job>/outputs.json                  their manifest (path, size, SHA-256); written last
jobs/<job>/logs/<attempt>/...            training stdout/stderr (local runtime)
jobs/<job>/tensorboard/...               scalars from report()
wheelhouse/<researcher>/<sha256>/wheels.zip   wheels of one requirements set, one
                                         researcher's (job environments; `wheelhouse_scope`)
"""

from __future__ import annotations

import hashlib
import re

from respot.spec.jobid import JOBS_PREFIX, check_job_id

WHEELHOUSE_PREFIX = "wheelhouse/"
_SCOPE = re.compile(r"[0-9a-f]{16}")
_REQUIREMENTS_HASH = re.compile(r"[0-9a-f]{64}")


def wheelhouse_scope(submitted_by: str | None, job_id: str) -> str:
    """Whose wheelhouse a job uses: 16 hex digits of the SHA-256 of its submitter's ARN.

    One researcher's jobs share a cache (reruns install warm); no job reads or writes another
    researcher's, so a wheel one job plants runs only in its own researcher's jobs (the job's
    credentials name this prefix alone, `respot.credentials.policy`). A job with no verified
    submitter gets a scope of its own (its id's: ARNs start with `arn:`, ids never do).
    """
    owner = submitted_by if submitted_by else f"job:{check_job_id(job_id)}"
    return hashlib.sha256(owner.encode()).hexdigest()[:16]


def wheelhouse_prefix(scope: str) -> str:
    """One researcher's wheelhouse (`scope` from `wheelhouse_scope`; ValueError otherwise)."""
    if not _SCOPE.fullmatch(scope):
        raise ValueError(f"wheelhouse scope {scope!r} is not 16 hex digits (wheelhouse_scope)")
    return f"{WHEELHOUSE_PREFIX}{scope}/"


def wheelhouse_key(scope: str, requirements_hash: str) -> str:
    """The wheels that satisfy one set of requirements on one platform, for one researcher's
    jobs (shared by their reruns)."""
    if not _REQUIREMENTS_HASH.fullmatch(requirements_hash):
        raise ValueError(f"requirements hash {requirements_hash!r} is not a SHA-256 hex digest")
    return f"{wheelhouse_prefix(scope)}{requirements_hash}/wheels.zip"


def job_prefix(job_id: str) -> str:
    """Everything of one job lives under this prefix (`InvalidJobIdError` for a bad id)."""
    return f"{JOBS_PREFIX}{check_job_id(job_id)}/"


def submission_key(job_id: str) -> str:
    """The submission as the control plane accepted it (the agent reads the spec from here)."""
    return f"{job_prefix(job_id)}submission.json"


def code_key(job_id: str, sha256: str) -> str:
    """The zipped source directory."""
    return f"{job_prefix(job_id)}code/{sha256}.zip"


# Under code/: researchers may upload it, none may read it.
WORKSPACE_TOKEN = "workspace-token"  # noqa: S105 - an object's name, not a secret


def workspace_token_key(job_id: str) -> str:
    """A workspace's Jupyter token (docs/notebooks.md): uploaded create-only by its owner with
    the code, read only with the job's own credentials (the researcher policy denies every
    researcher, its owner too, `s3:GetObject` on it; the laptop keeps its own copy)."""
    return f"{job_prefix(job_id)}code/{WORKSPACE_TOKEN}"


def checkpoints_prefix(job_id: str) -> str:
    """All checkpoint data of a job."""
    return f"{job_prefix(job_id)}checkpoints/"


def blob_key(job_id: str, sha256: str) -> str:
    """One checkpoint file's content, addressed by its SHA-256."""
    return f"{checkpoints_prefix(job_id)}blobs/{sha256}"


def manifests_prefix(job_id: str) -> str:
    """Where checkpoint manifests are listed."""
    return f"{checkpoints_prefix(job_id)}manifests/"


def manifest_key(job_id: str, step: int, attempt: int) -> str:
    """A checkpoint's manifest; lexical order of the keys is (step, attempt) order."""
    return f"{manifests_prefix(job_id)}{step:012d}-{attempt:04d}.json"


def parse_manifest_key(key: str) -> tuple[int, int] | None:
    """(step, attempt) of a manifest key, or None if the key is not one."""
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".json"):
        return None
    stem = name[: -len(".json")]
    parts = stem.split("-")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def handoff_key(job_id: str, attempt: int) -> str:
    """Marker: this attempt will write no more checkpoints (saved on notice, or gone)."""
    return f"{job_prefix(job_id)}handoff/{attempt:04d}.json"


def successor_ready_key(job_id: str, attempt: int) -> str:
    """Marker: the replacement of `attempt` is warm and waits for its final checkpoint."""
    return f"{job_prefix(job_id)}handoff/{attempt:04d}.successor.json"


def control_key(job_id: str, attempt: int) -> str:
    """A request from the control plane to one attempt's agent (checkpoint and stop)."""
    return f"{job_prefix(job_id)}control/{attempt:04d}.json"


def outputs_prefix(job_id: str) -> str:
    """Final outputs of the session."""
    return f"{job_prefix(job_id)}outputs/"


def outputs_manifest_key(job_id: str) -> str:
    """The outputs' manifest (outside the outputs prefix: no output file can be named so)."""
    return f"{job_prefix(job_id)}outputs.json"


def logs_root(job_id: str) -> str:
    """Training logs of every attempt."""
    return f"{job_prefix(job_id)}logs/"


def logs_prefix(job_id: str, attempt: int) -> str:
    """Training logs of one attempt."""
    return f"{job_prefix(job_id)}logs/{attempt:04d}/"


def tensorboard_prefix(job_id: str) -> str:
    """TensorBoard event files of a job."""
    return f"{job_prefix(job_id)}tensorboard/"
