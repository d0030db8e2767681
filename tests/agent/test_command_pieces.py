"""The pure pieces of command jobs (respot.commands): the argv the agent starts, the spool
channel (both sides, in one process), the notice file and the completeness rule."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from respot.commands import channel, contract
from respot.commands.argv import command_argv

PY = "/opt/job/bin/python"


@pytest.mark.parametrize(
    ("command", "nproc", "argv"),
    [
        (["python", "t.py", "-x"], 1, [PY, "t.py", "-x"]),
        (["python3", "-m", "pkg"], 1, [PY, "-m", "pkg"]),
        (
            ["python", "t.py"],
            4,
            [
                PY,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nnodes=1",
                "--nproc-per-node=4",
                "t.py",
            ],
        ),
        (
            ["torchrun", "--nproc-per-node=2", "t.py"],
            4,
            [PY, "-m", "torch.distributed.run", "--nproc-per-node=2", "t.py"],
        ),
        (
            ["torchrun", "t.py"],
            1,
            [
                PY,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nnodes=1",
                "--nproc-per-node=1",
                "t.py",
            ],
        ),
        (
            ["accelerate", "launch", "t.py"],
            2,
            [PY, "-m", "accelerate.commands.launch", "--num_processes", "2", "t.py"],
        ),
        (["bash", "run.sh", "$(id)"], 1, ["bash", "run.sh", "$(id)"]),
    ],
)
def test_the_command_runs_on_the_jobs_python_under_the_launcher_it_names(
    command: list[str], nproc: int, argv: list[str]
) -> None:
    assert command_argv(command, python=PY, nproc=nproc) == argv


def test_reports_and_checkpoints_cross_the_channel_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = channel.ChannelReader(tmp_path / "ch")
    monkeypatch.setenv(contract.ENV_CHANNEL_DIR, str(reader.directory))
    monkeypatch.setattr(channel, "_throttle", channel._Throttle())
    # GIVEN three reports at once: the first leaves, the throttle holds the newest back
    assert channel.report(1, total_steps=10, loss=0.5)
    assert channel.report(2, loss=0.4) and channel.report(3, loss=float("nan"), acc=1)
    # WHEN a process says a checkpoint is saved, it waits until the agent has taken it
    returned = threading.Event()
    t = threading.Thread(target=lambda: channel.checkpoint_saved(3) and returned.set())
    t.start()
    messages: list[channel.ChannelMessage] = []
    while not any(m.kind == "checkpoint" for m in messages):
        messages += reader.poll()
    assert not returned.wait(0.2)  # not before the snapshot
    checkpoint = messages[-1]
    reader.done(checkpoint)
    t.join(10)
    assert returned.is_set()
    # THEN the agent read them in the order written, the held-back report flushed first
    assert [(m.kind, m.step) for m in messages] == [("report", 1), ("report", 3), ("checkpoint", 3)]
    assert messages[0].total_steps == 10 and messages[1].metrics == {"acc": 1.0}
    assert list(reader.directory.iterdir()) == []


def test_outside_a_job_the_calls_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(contract.ENV_CHANNEL_DIR, raising=False)
    assert channel.report(1, loss=1.0) is False and channel.checkpoint_saved(1) is False


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        json.dumps({"type": "shell", "step": 1}),
        json.dumps({"type": "report", "step": -1}),
        json.dumps({"type": "report", "step": True}),
        json.dumps({"type": "checkpoint", "step": "3"}),
        json.dumps({"type": "report", "step": 1, "pad": "x" * channel.MAX_MESSAGE_BYTES}),
    ],
)
def test_a_malformed_message_is_dropped_not_acted_on(tmp_path: Path, body: str) -> None:
    reader = channel.ChannelReader(tmp_path)
    (tmp_path / "00000000000000000001-1-000001.json").write_text(body)
    assert reader.poll() == [] and reader.rejected == 1
    assert list(tmp_path.iterdir()) == []


def test_the_notice_file_appears_whole(tmp_path: Path) -> None:
    path = tmp_path / "notice"
    assert contract.read_notice(path) is None
    contract.write_notice(path, "spot-interruption", None)
    assert contract.read_notice(path) == {"notice": "spot-interruption", "reclaim_at": None}
    assert [p.name for p in tmp_path.iterdir()] == ["notice"]


def test_the_completeness_rule() -> None:
    # Only a clean exit after the notice, with something new written, is a checkpoint.
    assert contract.snapshot_at_exit(noticed=True, exit_code=0, changed=True)
    assert not contract.snapshot_at_exit(noticed=True, exit_code=0, changed=False)
    assert not contract.snapshot_at_exit(noticed=True, exit_code=-9, changed=True)
    assert not contract.snapshot_at_exit(noticed=True, exit_code=1, changed=True)
    assert not contract.snapshot_at_exit(noticed=False, exit_code=0, changed=True)


def test_snapshots_are_taken_off_the_agents_loop_and_acked_only_once_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from respot.agent import commandjob

    # GIVEN a checkpoint directory whose snapshot is slow (held until released)
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    (ckpt / "state.bin").write_bytes(b"x" * 1000)
    release = threading.Event()
    real_take = commandjob.CheckpointSnapshots.take

    def slow_take(self: object, step: int) -> Path:
        release.wait(10)
        return real_take(self, step)  # type: ignore[arg-type]

    monkeypatch.setattr(commandjob.CheckpointSnapshots, "take", slow_take)
    submitted: list[tuple[int, str]] = []
    uploader = type("U", (), {"submit": lambda self, p, s, r: submitted.append((s, r))})()
    snapper = commandjob.Snapshotter(ckpt, tmp_path / "staging", uploader, None, lambda: False)  # type: ignore[arg-type]
    reader = channel.ChannelReader(tmp_path / "ch")
    request = reader.directory / "00000000000000000001-1-000001.json"
    request.write_text(json.dumps({"type": "checkpoint", "step": 5}))
    (message,) = reader.poll()
    # WHEN the agent's loop hands it over, it goes on at once; the caller still waits
    snapper.ask(message)
    assert not snapper.close(0.2) and request.exists() and submitted == []
    # THEN once taken, it is uploaded and acked; an older or equal step is not taken again
    release.set()
    snapper._thread.join(10)
    assert submitted == [(5, "periodic")] and not request.exists()
    assert not snapper.changed()
    snapper.take(5, "notice")
    assert submitted == [(5, "periodic")]


def test_a_snapshot_that_fails_makes_checkpoint_saved_return_false(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from respot.agent import commandjob

    # GIVEN an agent whose snapshot of the checkpoint directory fails (a full disk)
    ckpt = tmp_path / "checkpoint"
    ckpt.mkdir()
    (ckpt / "state.bin").write_bytes(b"x" * 1000)

    def failing_take(self: object, step: int) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(commandjob.CheckpointSnapshots, "take", failing_take)
    submitted: list[tuple[int, str]] = []
    uploader = type("U", (), {"submit": lambda self, p, s, r: submitted.append((s, r))})()
    snapper = commandjob.Snapshotter(ckpt, tmp_path / "staging", uploader, 3, lambda: False)  # type: ignore[arg-type]
    reader = channel.ChannelReader(tmp_path / "ch")
    monkeypatch.setenv(contract.ENV_CHANNEL_DIR, str(reader.directory))
    monkeypatch.setattr(channel, "_throttle", channel._Throttle())
    # WHEN a process of the job says step 7 is saved, and the agent's loop hands it over
    result: list[bool] = []
    caller = threading.Thread(target=lambda: result.append(channel.checkpoint_saved(7)))
    caller.start()
    messages: list[channel.ChannelMessage] = []
    while not messages:
        messages = [m for m in reader.poll() if m.kind == "checkpoint"]
    snapper.ask(messages[0])
    caller.join(10)
    assert snapper.close(10)
    # THEN the caller hears that it failed, nothing is uploaded, the job's checkpoint stays
    # the one before (step 3), and the spool is left empty
    assert result == [False]
    assert submitted == [] and snapper.last_step == 3
    assert list(reader.directory.iterdir()) == []
