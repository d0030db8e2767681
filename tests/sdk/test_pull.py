"""`respot pull` / `JobHandle.outputs`: outputs, logs and checkpoint back, verified, inside DIR.

Against a real moto server (S3 over HTTP); the outputs are uploaded by the agent's own
`upload_outputs`, the checkpoint by `CheckpointStore`.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from respot.client.pull import pull_job, safe_target
from respot.core.job import JobRecord
from respot.core.states import JobState
from respot.exceptions import JobNotFinishedError, PullError
from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore
from respot.storage.outputs import upload_outputs
from tests.core.factories import T0, submission

BIG = 9 * 2**20  # above the 8 MiB a file needs for a progress bar of its own


@pytest.fixture
def s3(moto_endpoint: str, aws_credentials: None) -> Any:
    return boto3.client("s3", endpoint_url=moto_endpoint, region_name="us-east-1")


@pytest.fixture
def bucket(s3: Any) -> Iterator[str]:
    name = f"pull-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    yield name


def record(
    job_id: str, state: JobState, reason: str | None = None, outputs_sha256: str | None = None
) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        state=state,
        created_at=T0,
        updated_at=T0,
        submission=submission(job_id),
        reason=reason,
        outputs_sha256=outputs_sha256,
    )


def job_id() -> str:
    return f"job-{uuid.uuid4().hex[:8]}"


def write_outputs(root: Path) -> dict[str, bytes]:
    files = {
        "result.json": b'{"accuracy": 0.97}\n',
        "nested/deeper/note.txt": b"hello\n",
        "weights.bin": os.urandom(BIG),
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


class Bars:
    """A TransferProgress that records what it was told."""

    def __init__(self) -> None:
        self.files: list[tuple[str, int]] = []
        self.bytes: dict[str, int] = {}
        self.ended = False

    def begin(self, files: list[tuple[str, int]]) -> None:
        self.files = list(files)

    def advance(self, name: str, nbytes: int) -> None:
        self.bytes[name] = self.bytes.get(name, 0) + nbytes

    def end(self) -> None:
        self.ended = True


def test_a_completed_job_gives_its_outputs_logs_and_checkpoint_verified(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a completed job: outputs uploaded by the agent's code, a log, a checkpoint
    jid = job_id()
    files = write_outputs(tmp_path / "out")
    manifest = upload_outputs(
        s3, tmp_path / "out", bucket=bucket, job_id=jid, attempt=2, outcome="completed"
    )
    assert {f.path for f in manifest.files} == set(files)
    s3.put_object(Bucket=bucket, Key=layout.logs_prefix(jid, 1) + "session.log", Body=b"one\n")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "state.pt").write_bytes(b"state at 40")
    CheckpointStore(bucket=bucket, job_id=jid, client=s3).upload(
        ckpt, step=40, attempt=2, reason="final"
    )
    # WHEN it is pulled, with the checkpoint
    bars = Bars()
    dest = tmp_path / "pulled"
    done = record(jid, JobState.COMPLETED, outputs_sha256=manifest.sha256)
    result = pull_job(done, s3, bucket, dest, checkpoint=True, progress=bars)
    # THEN every output is there, byte for byte, SHA-256 verified
    for rel, data in files.items():
        assert (dest / "outputs" / rel).read_bytes() == data
    assert {f.path for f in result.outputs} == {dest / "outputs" / r for r in files}
    assert all(f.verified and f.sha256 == hashlib.sha256(files[_rel(f.path, dest)]).hexdigest()
               for f in result.outputs)  # fmt: skip
    assert result.outputs_outcome == "completed" and result.notes == []
    # AND the logs and the checkpoint
    assert (dest / "logs" / "0001" / "session.log").read_text() == "one\n"
    assert result.checkpoint is not None and result.checkpoint.step == 40
    assert (dest / "checkpoint" / "state.pt").read_bytes() == b"state at 40"
    # AND the progress display heard of every byte; no temporary file is left behind
    assert dict(bars.files)["weights.bin"] == BIG and bars.bytes["weights.bin"] == BIG
    assert bars.ended
    assert not [p for p in dest.rglob(".*part-*")]


def _rel(path: Path, dest: Path) -> str:
    return path.relative_to(dest / "outputs").as_posix()


def test_outputs_planted_with_a_matching_manifest_are_refused_against_the_job_record(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a job whose agent reported the SHA-256 of its outputs manifest (kept in the record)
    jid = job_id()
    write_outputs(tmp_path / "out")
    reported = upload_outputs(
        s3, tmp_path / "out", bucket=bucket, job_id=jid, attempt=1, outcome="completed"
    )
    done = record(jid, JobState.COMPLETED, outputs_sha256=reported.sha256)
    # AND someone who can write the prefix then plants a file with a manifest that matches it
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "result.json").write_text('{"accuracy": 0.01}\n')
    forged = upload_outputs(s3, planted, bucket=bucket, job_id=jid, attempt=1, outcome="completed")
    assert forged.sha256 != reported.sha256
    # WHEN it is pulled THEN the manifest is refused against the record; nothing is written
    dest = tmp_path / "pulled"
    with pytest.raises(PullError, match=r"not the one job .* reported"):
        pull_job(done, s3, bucket, dest)
    assert not [p for p in dest.rglob("*") if p.is_file()]
    # AND a manifest the job reported but that is gone is refused too (not "no outputs")
    s3.delete_object(Bucket=bucket, Key=layout.outputs_manifest_key(jid))
    with pytest.raises(PullError, match="which is gone"):
        pull_job(done, s3, bucket, dest)
    # AND with the true manifest back, the planted file is refused by its recorded SHA-256
    s3.put_object(Bucket=bucket, Key=layout.outputs_manifest_key(jid), Body=reported.body())
    with pytest.raises(PullError, match=r"result\.json has SHA-256 .* recorded at upload"):
        pull_job(done, s3, bucket, dest)
    # AND with the true file back too: pulled, verified
    s3.put_object(
        Bucket=bucket,
        Key=layout.outputs_prefix(jid) + "result.json",
        Body=(tmp_path / "out" / "result.json").read_bytes(),
    )
    result = pull_job(done, s3, bucket, dest)
    assert result.notes == [] and all(f.verified for f in result.outputs)
    assert (dest / "outputs" / "result.json").read_bytes() == b'{"accuracy": 0.97}\n'


def test_a_file_that_does_not_match_its_recorded_checksum_is_not_written(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN outputs whose weights were changed in S3 after upload (same size, other bytes)
    jid = job_id()
    write_outputs(tmp_path / "out")
    upload_outputs(s3, tmp_path / "out", bucket=bucket, job_id=jid, attempt=1, outcome="completed")
    s3.put_object(
        Bucket=bucket, Key=layout.outputs_prefix(jid) + "weights.bin", Body=os.urandom(BIG)
    )
    # WHEN it is pulled THEN it fails naming the file, and the bad file is not in DIR
    dest = tmp_path / "pulled"
    with pytest.raises(PullError, match=r"weights\.bin has SHA-256 .* recorded at upload"):
        pull_job(record(jid, JobState.COMPLETED), s3, bucket, dest)
    assert not (dest / "outputs" / "weights.bin").exists()
    assert not [p for p in dest.rglob("*part-*")]


@pytest.mark.parametrize(
    "hostile",
    [
        "../escaped.txt",  # hostile-path
        "a/../../escaped.txt",  # hostile-path
        "/etc/escaped.txt",
        "..\\escaped.txt",
        "C:/escaped.txt",
        "a/./b.txt",
    ],
)
def test_hostile_output_keys_never_land_outside_dir(
    s3: Any, bucket: str, tmp_path: Path, hostile: str
) -> None:
    # GIVEN outputs without a manifest, one of them with a key that climbs out of the prefix
    jid = job_id()
    prefix = layout.outputs_prefix(jid)
    s3.put_object(Bucket=bucket, Key=prefix + "fine.txt", Body=b"fine")
    s3.put_object(Bucket=bucket, Key=prefix + hostile, Body=b"escaped")
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    assert prefix + hostile in listed  # S3 keeps the key as written
    dest = tmp_path / "box" / "pulled"
    # WHEN it is pulled THEN it is refused, naming the key, and nothing is written anywhere
    with pytest.raises(PullError, match="refusing"):
        pull_job(record(jid, JobState.COMPLETED), s3, bucket, dest)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []


def test_a_manifest_naming_a_path_outside_dir_is_refused(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a forged outputs manifest naming ../../x  # hostile-path
    jid = job_id()
    s3.put_object(
        Bucket=bucket,
        Key=layout.outputs_manifest_key(jid),
        Body=json.dumps(
            {
                "schema_version": 1,
                "job_id": jid,
                "attempt": 1,
                "outcome": "completed",
                "created_at": "2026-11-23T00:00:00Z",
                "files": [{"path": "../../x", "size": 1, "sha256": "0" * 64}],  # hostile-path
            }
        ).encode(),
    )
    with pytest.raises(PullError, match="malformed"):
        pull_job(record(jid, JobState.COMPLETED), s3, bucket, tmp_path / "pulled")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_link_planted_inside_dir_does_not_lead_out(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PullError, match="leads outside"):
        safe_target(dest, "sub/file.txt")
    (dest / "link.txt").symlink_to(outside / "file.txt")
    with pytest.raises(PullError, match="symbolic link"):
        safe_target(dest, "link.txt")
    assert safe_target(dest, "ok/file.txt") == dest / "ok" / "file.txt"


def test_pulling_a_job_that_has_not_ended_says_so(s3: Any, bucket: str, tmp_path: Path) -> None:
    jid = job_id()
    running = record(jid, JobState.RUNNING)
    running.progress.step, running.progress.total_steps = 120, 900
    with pytest.raises(JobNotFinishedError, match=r"is RUNNING at step 120 of 900.*when it ends"):
        pull_job(running, s3, bucket, tmp_path / "pulled")
    assert not (tmp_path / "pulled").exists()


def test_a_failed_job_gives_what_it_left(s3: Any, bucket: str, tmp_path: Path) -> None:
    # GIVEN a job that failed: the agent uploaded its partial outputs (outcome failed), a log
    jid = job_id()
    out = tmp_path / "out"
    out.mkdir()
    (out / "partial.csv").write_text("epoch,loss\n1,0.9\n")
    upload_outputs(s3, out, bucket=bucket, job_id=jid, attempt=1, outcome="failed")
    s3.put_object(Bucket=bucket, Key=layout.logs_prefix(jid, 1) + "session.log", Body=b"boom\n")
    # WHEN pulled (with --checkpoint, though it never saved one)
    result = pull_job(
        record(jid, JobState.FAILED, "the session raised ValueError: boom"),
        s3,
        bucket,
        tmp_path / "pulled",
        checkpoint=True,
    )
    # THEN it gives the partial outputs and the log, and says what is missing and why
    assert (tmp_path / "pulled" / "outputs" / "partial.csv").read_text().startswith("epoch")
    assert result.outputs_outcome == "failed"
    assert (tmp_path / "pulled" / "logs" / "0001" / "session.log").read_text() == "boom\n"
    assert result.checkpoint is None
    assert any("FAILED (the session raised ValueError: boom)" in n for n in result.notes)
    assert any("no checkpoint" in n for n in result.notes)


def test_outputs_without_a_manifest_are_size_checked(s3: Any, bucket: str, tmp_path: Path) -> None:
    # GIVEN outputs uploaded before manifests existed (plain objects), one truncated in S3
    jid = job_id()
    prefix = layout.outputs_prefix(jid)
    s3.put_object(Bucket=bucket, Key=prefix + "a.txt", Body=b"abc")
    result = pull_job(record(jid, JobState.COMPLETED), s3, bucket, tmp_path / "p")
    assert [(f.size, f.verified) for f in result.outputs] == [(3, False)]
    assert any("no manifest" in n for n in result.notes)
