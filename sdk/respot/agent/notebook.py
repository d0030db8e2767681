"""Notebooks as jobs: an `.ipynb` entry point executed by Papermill in the session process.

The agent runs `NotebookSession` (a `TrainingSession`) in its usual child process
(`session_entry`). Its `train()`:
1. opens a private Unix socket (a fresh 0700 directory, a random key) that the notebook's
   `respot.session()` connects to (`respot.training.notebook`): reports, checkpoints and the
   interruption flag travel over it to this session, and from here to the agent as usual;
2. executes the notebook with Papermill in an IPython kernel (`ipykernel`, bound to
   127.0.0.1; no network needed), the hyperparameters as its parameters, the code directory
   as its working directory, cell outputs to the job's log as they come. The kernel is a
   new process of the job's Python, which on the AMI cannot import respot (respot's site is
   added inside the session process only): its PYTHONPATH gets a directory holding respot
   alone (a link to this process's respot package), never the agent's whole site, whose
   packages would shadow the job's own (torch's numpy);
3. writes the executed notebook, with its outputs, into `output_dir` under the notebook's
   name, so it is uploaded with the job's outputs (also when a cell fails) and
   `respot pull` fetches it.
A cell that raises fails the job with the cell's error, unless an interruption notice had
arrived (then the notebook stopped on purpose: `stop_if_interrupted()`), which counts as
interrupted; the next instance executes the notebook again from the top.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from respot.training.notebook import ENV_AUTHKEY, ENV_SOCKET
from respot.training.session import TrainingSession

if TYPE_CHECKING:
    from respot.spec.training import TrainingEnvVar

logger = logging.getLogger(__name__)

NOTEBOOK_SESSION = "respot.agent.notebook:NotebookSession"
ENV_NOTEBOOK = "RESPOT_NOTEBOOK"  # the notebook's path relative to the code directory
KERNEL_NAME = "python3"  # ipykernel's own kernel: this Python, this environment
KERNEL_START_SECONDS = 300
MAX_REQUEST_BYTES = 64 * 1024  # a loaded machine can take a while to start a kernel


def is_notebook(entry_point: str | None) -> bool:
    """True for an `.ipynb` entry point."""
    return bool(entry_point and entry_point.endswith(".ipynb"))


def session_entry(spec: TrainingEnvVar) -> tuple[str, dict[str, str]]:
    """The entry point the session process imports, and the environment it adds."""
    assert spec.entry_point is not None
    if is_notebook(spec.entry_point):
        return NOTEBOOK_SESSION, {**spec.environment, ENV_NOTEBOOK: spec.entry_point}
    return spec.entry_point, dict(spec.environment)


def kernel_pythonpath(directory: Path, existing: str | None) -> str:
    """The kernel's PYTHONPATH: `directory`, made to hold only a link to this process's respot
    package, before whatever PYTHONPATH the job had."""
    package = Path(__file__).resolve().parents[1]  # <site>/respot (this is respot/agent/...)
    directory.mkdir(parents=True, exist_ok=True)
    link = directory / "respot"
    if not link.is_symlink():
        link.symlink_to(package, target_is_directory=True)
    return os.pathsep.join(p for p in (str(directory), existing or "") if p)


class NotebookError(RuntimeError):
    """A cell of the notebook raised (the message names the cell and the error)."""


class NotebookSession(TrainingSession):
    """Runs the notebook named by RESPOT_NOTEBOOK; see the module docstring."""

    def train(self) -> None:
        code_dir = Path.cwd().resolve()
        rel = os.environ.get(ENV_NOTEBOOK, "")
        notebook = (code_dir / rel).resolve()
        if not rel or code_dir not in notebook.parents or not notebook.is_file():
            raise NotebookError(f"the notebook {rel!r} is not in the job's code")
        executed = self.output_dir / notebook.name
        with _Channel(self) as channel:
            os.environ[ENV_SOCKET] = channel.address
            os.environ[ENV_AUTHKEY] = channel.authkey.hex()
            os.environ["PYTHONPATH"] = kernel_pythonpath(
                channel.directory / "respot-alone", os.environ.get("PYTHONPATH")
            )
            print(f"respot: executing {rel} with papermill", flush=True)
            try:
                _execute(notebook, executed, dict(self.hparams), code_dir)
            except Exception as exc:
                if self.interruption_requested:
                    print("respot: the notebook stopped on the interruption notice", flush=True)
                    return
                raise NotebookError(_describe(exc)) from None
        print(f"respot: the executed notebook is {executed.name} in the outputs", flush=True)


def _execute(notebook: Path, executed: Path, parameters: dict[str, Any], cwd: Path) -> None:
    import papermill

    papermill.execute_notebook(
        str(notebook),
        str(executed),
        parameters=parameters,
        kernel_name=KERNEL_NAME,
        language="python",
        cwd=str(cwd),
        log_output=True,  # cell outputs go to the job's log (CloudWatch, respot logs)
        progress_bar=False,
        start_timeout=KERNEL_START_SECONDS,
    )


def _describe(exc: Exception) -> str:
    ename = getattr(exc, "ename", None)
    if ename is not None:  # papermill.PapermillExecutionError
        count = getattr(exc, "exec_count", None)
        where = f"the cell In [{count}]" if count is not None else "a cell"
        return f"{where} raised {ename}: {getattr(exc, 'evalue', '')}"[:1500]
    return f"{type(exc).__name__}: {exc}"[:1500]


class _Channel:
    """The Unix socket the kernel's `respot.session()` talks to; one thread per connection."""

    def __init__(self, session: TrainingSession) -> None:
        self._session = session
        self._dir = Path(tempfile.mkdtemp(prefix="respot-nb-"))  # 0700: only this user
        self.directory = self._dir
        self.address = str(self._dir / "session.sock")
        self.authkey = secrets.token_bytes(32)
        self._listener: Any = None
        self._closed = threading.Event()

    def __enter__(self) -> _Channel:
        from multiprocessing.connection import Listener

        self._listener = Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        threading.Thread(target=self._accept, name="notebook-channel", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed.set()
        try:
            self._listener.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn = self._listener.accept()
            except Exception:  # closed, or a client without the key
                if self._closed.is_set():
                    return
                logger.warning("a connection to the notebook channel was refused")
                continue
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Any) -> None:
        session = self._session
        with conn:
            while True:
                try:
                    # JSON, not pickle: nothing received here is ever unpickled.
                    request = json.loads(conn.recv_bytes(MAX_REQUEST_BYTES))
                except (EOFError, OSError, ValueError):
                    return
                kind = request[0] if isinstance(request, list) and request else None
                reply: Any = None
                if kind == "report" and len(request) == 4:
                    _, step, total, metrics = request
                    if total is not None:
                        session.total_steps = int(total)
                    session.report(int(step), **{str(k): float(v) for k, v in metrics.items()})
                elif kind == "checkpoint" and len(request) == 2:
                    session.save_checkpoint(int(request[1]))
                elif kind == "state":
                    reply = {
                        "notice": session.interruption_notice,
                        "checkpoint_requested": session.checkpoint_requested,
                    }
                try:
                    conn.send_bytes(json.dumps(reply).encode())
                except OSError:
                    return
