"""TrainingSession in-process, checkpoint snapshots, and the standalone runner."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from respot.agent import standalone
from respot.agent.exceptions import SessionFailedError
from respot.agent.process import SessionProcess
from respot.agent.snapshots import CheckpointSnapshots
from respot.agent.standalone import run_standalone
from respot.spec.training import TrainingEnvVar
from respot.training.session import TrainingSession

from .conftest import JOBS_DIR


class Recorder:
    """A SessionHost that remembers what the session told it."""

    def __init__(self) -> None:
        self.reports: list[tuple[int, int | None, dict[str, float]]] = []
        self.checkpoints: list[tuple[int, str]] = []

    def report(self, step: int, total_steps: int | None, metrics: dict[str, float]) -> None:
        self.reports.append((step, total_steps, metrics))

    def checkpoint(self, step: int, reason: str) -> None:
        self.checkpoints.append((step, reason))


class Hooked(TrainingSession):
    hook_calls: list[str]

    def train(self) -> None:  # the flags are driven by hand in these tests
        self.report(1)

    def on_interruption(self, notice: str) -> None:
        self.hook_calls.append(notice)


def make(tmp_path: Path, host: Recorder) -> Hooked:
    session = Hooked(
        checkpoint_dir=tmp_path / "ckpt",
        data_dir=tmp_path / "data",
        output_dir=tmp_path / "out",
        host=host,
    )
    session.hook_calls = []
    return session


def test_session_flags_reasons_and_metrics(tmp_path: Path) -> None:
    host = Recorder()
    session = make(tmp_path, host)
    session.total_steps = 10
    session.report(1, loss=0.5, bad=float("nan"), inf=float("inf"), n=3)
    session.save_checkpoint(1)
    session.request_checkpoint()  # a rebalance recommendation
    assert session.checkpoint_requested and not session.interruption_requested
    session.save_checkpoint(2)
    assert not session.checkpoint_requested
    session.request_interruption("spot-interruption")
    session.request_interruption("stop")  # a second notice changes nothing
    session.save_checkpoint(3)
    assert host.reports == [(1, 10, {"loss": 0.5, "n": 3.0})]
    assert host.checkpoints == [(1, "periodic"), (2, "notice"), (3, "notice")]
    assert session.interruption_requested and session.interruption_notice == "spot-interruption"
    assert session.hook_calls == ["spot-interruption"]
    assert (session.last_step, session.last_checkpoint_step) == (3, 3)


def test_train_must_be_overridden(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="train"):
        TrainingSession(  # type: ignore[abstract]
            checkpoint_dir=tmp_path / "c", data_dir=tmp_path, output_dir=tmp_path / "o"
        )


def test_snapshots_copy_changed_files_and_link_unchanged_ones(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    (src / "sub").mkdir(parents=True)
    (src / "weights.bin").write_bytes(b"w" * 1000)
    (src / "sub" / "state.json").write_text('{"step": 1}')
    snaps = CheckpointSnapshots(src, tmp_path / "staging")
    first = snaps.take(1)
    assert snaps.last_stats.copied_bytes == 1011 and snaps.last_stats.linked_bytes == 0
    # The session rewrites state.json (atomically) and leaves weights.bin alone.
    tmp = src / "sub" / "state.json.tmp"
    tmp.write_text('{"step": 2}')
    os.replace(tmp, src / "sub" / "state.json")
    second = snaps.take(2)
    assert snaps.last_stats.copied_bytes == 11 and snaps.last_stats.linked_bytes == 1000
    assert (first / "weights.bin").stat().st_ino == (second / "weights.bin").stat().st_ino
    assert (first / "sub" / "state.json").read_text() == '{"step": 1}'  # frozen
    assert (second / "sub" / "state.json").read_text() == '{"step": 2}'
    # Rewriting a file in place (same inode) is seen as a change too.
    with open(src / "weights.bin", "r+b") as fh:
        fh.write(b"W")
    third = snaps.take(3)
    assert (third / "weights.bin").read_bytes() == b"W" + b"w" * 999
    assert (second / "weights.bin").read_bytes() == b"w" * 1000
    assert sorted(p.name for p in (tmp_path / "staging").iterdir()) == [
        "000001-000000000001",
        "000002-000000000002",
        "000003-000000000003",
    ]


def test_a_snapshot_copies_when_the_previous_one_is_gone(tmp_path: Path) -> None:
    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "weights.bin").write_bytes(b"w" * 100)
    snaps = CheckpointSnapshots(src, tmp_path / "staging")
    first = snaps.take(1)
    for p in first.iterdir():
        p.unlink()
    first.rmdir()  # uploaded and removed by the agent
    second = snaps.take(2)
    assert (second / "weights.bin").read_bytes() == b"w" * 100


def counting_spec(**hparams: object) -> TrainingEnvVar:
    return TrainingEnvVar(
        name="count", entry_point="countjob:CountingSession", hyperparameters=hparams
    )


def test_standalone_interrupted_runs_resume_to_the_same_result(tmp_path: Path) -> None:
    spec = counting_spec(steps=120, sleep=0.01, checkpoint_every=1000)
    plain = run_standalone(
        spec, code_dir=JOBS_DIR, data_dir=tmp_path / "data", work_dir=tmp_path / "plain"
    )
    interrupted = run_standalone(
        spec,
        code_dir=JOBS_DIR,
        data_dir=tmp_path / "data",
        work_dir=tmp_path / "cut",
        interrupt_at_steps=[20, 70],
    )
    a = json.loads((plain / "result.json").read_text())
    b = json.loads((interrupted / "result.json").read_text())
    assert a["total"] == b["total"] == sum(range(1, 121))
    assert (a["attempt"], a["resumed_from"]) == (1, None)
    assert b["attempt"] == 3 and 70 <= b["resumed_from"] < 120
    attempts = sorted(p.name for p in (tmp_path / "cut" / "attempts").iterdir())
    assert attempts == ["0001", "0002", "0003"]


def test_standalone_raises_with_the_log_tail_when_the_session_fails(tmp_path: Path) -> None:
    spec = counting_spec(steps=10, fail_at=4)
    with pytest.raises(SessionFailedError) as info:
        run_standalone(spec, code_dir=JOBS_DIR, data_dir=tmp_path, work_dir=tmp_path / "w")
    assert info.value.exit_code == 1
    assert info.value.reason == "the session raised ValueError: boom at step 4"
    assert info.value.log_tail[-1] == "ValueError: boom at step 4"


def test_a_process_that_lingers_after_train_returns_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The session's leftover thread would keep its process alive for an hour: only the
    # runner's grace after train() returned can end it, and it is seen doing so.
    monkeypatch.setattr(standalone, "EXIT_GRACE_SECONDS", 0.5)
    stopped: list[float] = []
    terminate = SessionProcess.terminate

    def spy(self: SessionProcess, grace_seconds: float = 10.0) -> None:
        stopped.append(grace_seconds)
        terminate(self, grace_seconds)

    monkeypatch.setattr(SessionProcess, "terminate", spy)
    spec = TrainingEnvVar(name="x", entry_point="countjob:LingeringSession")
    out = run_standalone(spec, code_dir=JOBS_DIR, data_dir=tmp_path, work_dir=tmp_path / "w")
    assert json.loads((out / "result.json").read_text()) == {"step": 1}
    assert stopped, "the lingering process ended without the runner stopping it"


def test_a_wrong_entry_point_fails_clearly(tmp_path: Path) -> None:
    spec = TrainingEnvVar(name="x", entry_point="countjob:NoSuchClass")
    with pytest.raises(SessionFailedError, match=r"not a respot\.TrainingSession subclass"):
        run_standalone(spec, code_dir=JOBS_DIR, data_dir=tmp_path, work_dir=tmp_path / "w")
