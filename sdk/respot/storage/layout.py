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
wheelhouse/<sha256>/wheels.zip           wheels of one requirements set (job environments)
"""

from __future__ import annotations

from respot.spec.jobid import JOBS_PREFIX, check_job_id

WHEELHOUSE_PREFIX = "wheelhouse/"


def wheelhouse_key(requirements_hash: str) -> str:
    """The wheels that satisfy one set of requirements on one platform (shared by reruns)."""
    return f"{WHEELHOUSE_PREFIX}{requirements_hash}/wheels.zip"


def job_prefix(job_id: str) -> str:
    """Everything of one job lives under this prefix (`InvalidJobIdError` for a bad id)."""
    return f"{JOBS_PREFIX}{check_job_id(job_id)}/"


def submission_key(job_id: str) -> str:
    """The submission as the control plane accepted it (the agent reads the spec from here)."""
    return f"{job_prefix(job_id)}submission.json"


def code_key(job_id: str, sha256: str) -> str:
    """The zipped source directory."""
    return f"{job_prefix(job_id)}code/{sha256}.zip"


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
