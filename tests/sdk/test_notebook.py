"""Notebooks as jobs, below the end-to-end test: the spec, `respot run x.ipynb -p`, and the
channel between a kernel's `respot.session()` and the session process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from respot.agent.notebook import NOTEBOOK_SESSION, _Channel, session_entry
from respot.cli import app
from respot.exceptions import SpecError
from respot.spec.jobfile import JobFileError, load_notebook_job, parameter_override
from respot.spec.training import TrainingEnvVar
from respot.training.notebook import Interrupted, NotebookSession
from respot.training.session import TrainingSession

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "notebook" / "train.ipynb"


@pytest.mark.parametrize("good", ["train.ipynb", "notebooks/exp 1/train-v2.ipynb"])
def test_a_notebook_entry_point_is_a_path_inside_source_dir(good: str) -> None:
    assert TrainingEnvVar(name="n", entry_point=good).entry_point == good


@pytest.mark.parametrize(
    "bad",
    [
        "../train.ipynb",  # hostile-path
        "/abs/train.ipynb",
        "a/../../train.ipynb",  # hostile-path
        "a//b.ipynb",
        ".ipynb",
    ],
)
def test_a_notebook_outside_source_dir_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(SpecError, match=r"entry_point: .*not a notebook path inside source_dir"):
        TrainingEnvVar(name="n", entry_point=bad)


def test_run_of_a_notebook_builds_the_job_with_its_parameters() -> None:
    job = load_notebook_job(EXAMPLE, [parameter_override("lr=0.01"), "max_interruptions=3"])
    spec = job.spec
    assert (spec.name, spec.entry_point) == ("train", "train.ipynb")
    assert spec.source_dir == str(EXAMPLE.parent)
    assert spec.hyperparameters == {"lr": 0.01} and spec.max_interruptions == 3
    # On the instance the session process runs the notebook session, told which notebook.
    entry, env = session_entry(spec)
    assert entry == NOTEBOOK_SESSION and env["RESPOT_NOTEBOOK"] == "train.ipynb"


def test_bad_parameters_and_missing_notebooks_fail_on_the_laptop(tmp_path: Path) -> None:
    with pytest.raises(JobFileError, match=r"-p 'lr': write name=value"):
        parameter_override("lr")
    with pytest.raises(JobFileError, match="no such notebook"):
        load_notebook_job(tmp_path / "nope.ipynb")
    result = CliRunner().invoke(app, ["run", str(EXAMPLE), "-p", "steps=50", "--check", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["hyperparameters"] == {"steps": 50}
    bad = CliRunner().invoke(app, ["run", str(EXAMPLE), "-p", "1x=2", "--check"])
    assert bad.exit_code == 1 and "-p '1x=2'" in bad.output


class Recorder(TrainingSession):
    """A session that only records what the channel hands it."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(checkpoint_dir=tmp / "c", data_dir=tmp / "d", output_dir=tmp / "o")
        self.reports: list[tuple[int, int | None, dict[str, float]]] = []
        self.checkpoints: list[int] = []

    def train(self) -> None:
        raise AssertionError("not run here")

    def report(self, step: int, **metrics: float) -> None:
        self.reports.append((step, self.total_steps, metrics))

    def save_checkpoint(self, step: int) -> None:
        super().save_checkpoint(step)
        self.checkpoints.append(step)


def test_the_kernel_session_reaches_the_session_process(tmp_path: Path) -> None:
    host = Recorder(tmp_path)
    with _Channel(host) as channel:
        env: dict[str, Any] = {
            "RESPOT_NOTEBOOK_SOCKET": channel.address,
            "RESPOT_NOTEBOOK_AUTHKEY": channel.authkey.hex(),
            "RESPOT_CHECKPOINT_DIR": str(tmp_path / "c"),
            "RESPOT_OUTPUT_DIR": str(tmp_path / "o"),
            "RESPOT_RESUME_STEP": "40",
            "RESPOT_HYPERPARAMETERS": json.dumps({"lr": 0.1}),
        }
        s = NotebookSession(env)
        assert s.resume_step == 40 and s.hparams == {"lr": 0.1}
        assert s.checkpoint_dir == tmp_path / "c"
        s.total_steps = 100
        s.report(41, loss=0.5)
        assert not s.interruption_requested and not s.checkpoint_requested
        s.stop_if_interrupted()  # nothing happens without a notice
        host.request_checkpoint()
        assert s.checkpoint_requested
        s.save_checkpoint(41)
        assert not s.checkpoint_requested  # cleared by the checkpoint, as in TrainingSession
        host.request_interruption("spot-interruption")
        assert s.interruption_requested
        with pytest.raises(Interrupted):
            s.stop_if_interrupted()
    assert host.reports == [(41, 100, {"loss": 0.5})]
    assert host.checkpoints == [41]
    # The socket's private directory is gone with the channel.
    assert not Path(channel.address).parent.exists()


def test_a_client_without_the_key_is_refused(tmp_path: Path) -> None:
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    with _Channel(Recorder(tmp_path)) as channel:
        with pytest.raises(AuthenticationError):
            Client(channel.address, family="AF_UNIX", authkey=b"wrong" * 8)
        assert oct(Path(channel.address).parent.stat().st_mode & 0o777) == "0o700"


def test_outside_respot_the_session_uses_local_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = NotebookSession({})
    assert s.resume_step is None and not s.interruption_requested
    s.report(1, loss=1.0)
    s.save_checkpoint(1)
    assert (tmp_path / "respot-session" / "checkpoint").is_dir()
