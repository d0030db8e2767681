"""`respot.session()`: the session API inside a notebook cell that respot runs as a job.

A notebook job (`entry_point: train.ipynb`) is executed by Papermill in an IPython kernel on
the instance (`respot.agent.notebook`). The kernel is its own process, so the session it sees
is a client: the directories and the resume step come from the environment the agent set,
and `report`, `save_checkpoint` and the interruption flag go over a private Unix socket to
the session process, which forwards them to the agent like any `TrainingSession`.

A resumable notebook::

    import respot
    s = respot.session()
    state = load(s.checkpoint_dir) if s.resume_step is not None else fresh()   # your code
    s.total_steps = 1000
    for step in range(state.step + 1, s.total_steps + 1):
        ...                                              # one step
        s.report(step, loss=loss)
        if step % 100 == 0 or s.interruption_requested:
            save(state, s.checkpoint_dir)                # your code
            s.save_checkpoint(step)
            s.stop_if_interrupted()                      # the notebook stops here; resumed later

On resume the notebook is executed again from the top: cells skip what the checkpoint
already holds by looking at `s.resume_step` (or at files in `s.checkpoint_dir`).

Outside respot (Jupyter on a laptop) `respot.session()` works too: the directories are under
`./respot-session/`, nothing is resumed and no notice ever comes.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

ENV_SOCKET = "RESPOT_NOTEBOOK_SOCKET"
ENV_AUTHKEY = "RESPOT_NOTEBOOK_AUTHKEY"
LOCAL_ROOT = "respot-session"

__all__ = ["Interrupted", "NotebookSession", "session"]


class Interrupted(Exception):  # noqa: N818 - what the notebook reader sees in the cell's output
    """Raised by `stop_if_interrupted()`: the notebook stops; the job resumes on a new instance."""


class NotebookSession:
    """What a cell needs: directories, hyperparameters, resume step, reports, checkpoints."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        self.on_respot = ENV_SOCKET in env
        root = Path(LOCAL_ROOT)
        self.checkpoint_dir = Path(env.get("RESPOT_CHECKPOINT_DIR") or root / "checkpoint")
        self.data_dir = Path(env.get("RESPOT_DATA_DIR") or root / "data")
        self.output_dir = Path(env.get("RESPOT_OUTPUT_DIR") or root / "output")
        self.hparams: dict[str, Any] = json.loads(env.get("RESPOT_HYPERPARAMETERS") or "{}")
        resume = env.get("RESPOT_RESUME_STEP")
        self.resume_step: int | None = int(resume) if resume else None
        self.job_id = env.get("RESPOT_JOB_ID", "local")
        self.attempt = int(env.get("RESPOT_ATTEMPT", "1"))
        self.seed = int(env.get("RESPOT_SEED", "0"))
        self.total_steps: int | None = None
        self._lock = threading.Lock()
        self._conn: Any = None
        if self.on_respot:
            from multiprocessing.connection import Client

            self._conn = Client(
                env[ENV_SOCKET], family="AF_UNIX", authkey=bytes.fromhex(env[ENV_AUTHKEY])
            )
        for d in (self.checkpoint_dir, self.output_dir):
            d.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return (
            f"NotebookSession(job_id={self.job_id!r}, attempt={self.attempt}, "
            f"resume_step={self.resume_step}, checkpoint_dir={str(self.checkpoint_dir)!r})"
        )

    def _call(self, *request: Any) -> Any:
        if self._conn is None:
            return None
        with self._lock:
            self._conn.send_bytes(json.dumps(request).encode())
            return json.loads(self._conn.recv_bytes())

    def report(self, step: int, **metrics: float) -> None:
        """The current step and metrics (progress, ETA, TensorBoard, Slack)."""
        self._call("report", int(step), self.total_steps, {k: float(v) for k, v in metrics.items()})

    def save_checkpoint(self, step: int) -> None:
        """Mark `checkpoint_dir` as the checkpoint of `step`; returns once it is snapshotted."""
        self._call("checkpoint", int(step))

    @property
    def interruption_requested(self) -> bool:
        """True once the instance is about to go: checkpoint, then `stop_if_interrupted()`."""
        state = self._call("state")
        return bool(state and state.get("notice"))

    @property
    def checkpoint_requested(self) -> bool:
        """True after a rebalance recommendation until the next `save_checkpoint`."""
        state = self._call("state")
        return bool(state and state.get("checkpoint_requested"))

    def stop_if_interrupted(self) -> None:
        """Stop the notebook here (raise `Interrupted`) if a notice arrived."""
        if self.interruption_requested:
            raise Interrupted(
                "an interruption notice arrived: the checkpoint is saved; respot resumes this "
                "notebook on another instance"
            )


_SESSIONS: dict[str, NotebookSession] = {}


def session() -> NotebookSession:
    """The notebook's session (one per kernel: one connection to the job)."""
    if "current" not in _SESSIONS:
        _SESSIONS["current"] = NotebookSession()
    return _SESSIONS["current"]
