"""An attempt's session.log is in S3 before its last report, on every ending.

The control plane terminates an interrupted attempt's instance as soon as it reads the
AgentPreempted report (`core.lifecycle.reports._preempted`), and the local runtime kills the
instance's processes at once: whatever the agent does after that report may never happen.
So the durable copy of what the session printed is written first. The endings run here on a
real (moto) S3, with the messenger replaced by one that records when each report is sent.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from respot.agent.endings import Endings
from respot.agent.notices import InterruptionNotice
from respot.agent.process import AttemptDirs
from respot.agent.progress import Progress
from respot.agent.scalars import ScalarLog
from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore

JOB = "count-0123abcd"
ATTEMPT = 2


class Recorder:
    """What reached S3 and which reports were sent, in one order."""

    def __init__(self, s3: Any) -> None:
        self.order: list[str] = []
        s3.meta.events.register("before-parameter-build.s3.PutObject", self._put)
        s3.meta.events.register("before-parameter-build.s3.CreateMultipartUpload", self._put)

    def _put(self, params: dict[str, Any], **_: Any) -> None:
        self.order.append(f"s3:{params['Key']}")

    # the messenger's side
    def send(self, body: Any) -> None:
        self.order.append(f"report:{body.kind}")

    def flush(self, timeout: float) -> bool:
        return True


class Uploads:
    """A checkpoint uploader with nothing left to upload."""

    last_step = 10
    last_manifest_key = None

    def wait_idle(self, timeout: float) -> bool:
        return True


def ending(s3: Any, bucket: str, tmp_path: Path, recorder: Recorder) -> Endings:
    dirs = AttemptDirs(tmp_path / "attempt")
    for d in (dirs.root, dirs.output):
        d.mkdir(parents=True, exist_ok=True)
    dirs.log.write_bytes(b"step 1\nstep 10\nTraceback: the last words\n")
    end = Endings.__new__(Endings)  # the state an attempt has when it ends, without the agent
    end.agent = SimpleNamespace(_notice=InterruptionNotice("spot-interruption", None))
    end.config = SimpleNamespace(bucket=bucket)
    end.s3 = s3
    end.identity = SimpleNamespace(instance_id="i-0123")
    end.job_id, end.attempt = JOB, ATTEMPT
    end.messenger = recorder
    end.dirs = dirs
    end.progress = Progress()
    end.store = CheckpointStore(bucket=bucket, job_id=JOB, client=s3)
    end.restored_step = None
    end.scalars = ScalarLog(dirs.root / "tensorboard", attempt=ATTEMPT)
    end.shipper = None
    return end


@pytest.mark.parametrize("outcome", ["preempted", "failed", "completed"])
def test_session_log_is_in_s3_before_the_last_report(
    s3: Any, bucket: str, tmp_path: Path, outcome: str
) -> None:
    recorder = Recorder(s3)
    end = ending(s3, bucket, tmp_path, recorder)
    uploads: Any = Uploads()
    # WHEN the attempt ends this way
    if outcome == "preempted":
        end._preempted(uploads, step=10)
    elif outcome == "failed":
        end._failed(uploads, "the session raised ValueError", 1, [], step=10)
    else:
        end._completed(uploads, step=10, train_seconds=1.0)
    # THEN session.log went to S3 before the report that lets the control plane end the
    # instance, and it holds everything the session printed
    log_key = layout.logs_prefix(JOB, ATTEMPT) + "session.log"
    report = f"report:{'preempted' if outcome == 'preempted' else outcome}"
    assert f"s3:{log_key}" in recorder.order, recorder.order
    assert report in recorder.order, recorder.order
    assert recorder.order.index(f"s3:{log_key}") < recorder.order.index(report), recorder.order
    body = s3.get_object(Bucket=bucket, Key=log_key)["Body"].read()
    assert body == b"step 1\nstep 10\nTraceback: the last words\n"


def test_an_early_copy_never_lands_after_the_final_one(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    end = ending(s3, bucket, tmp_path, Recorder(s3))
    key = layout.logs_prefix(JOB, ATTEMPT) + "session.log"

    def stored() -> bytes:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        return body

    # GIVEN the early copy, made once train() returned on the notice
    end._upload_session_log(final=False)
    assert stored() == b"step 1\nstep 10\nTraceback: the last words\n"
    # WHEN the process has printed its last lines and the attempt ends
    with end.dirs.log.open("ab") as log:
        log.write(b"torn down\n")
    end._save_log()
    # THEN the final copy is whole, and a late early copy does not replace it
    end.dirs.log.write_bytes(b"something else\n")
    end._upload_session_log(final=False)
    assert stored() == b"step 1\nstep 10\nTraceback: the last words\ntorn down\n"
