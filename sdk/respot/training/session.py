"""`TrainingSession`: the class a researcher subclasses; the agent runs it on the instance."""

from __future__ import annotations

import abc
import math
import sys
import threading
import traceback
from pathlib import Path
from typing import Any, Protocol

__all__ = ["SessionHost", "TrainingSession"]


class SessionHost(Protocol):
    """What runs a session (the agent's child process): receives reports and checkpoints."""

    def report(self, step: int, total_steps: int | None, metrics: dict[str, float]) -> None:
        """Take the latest step and metrics (the host throttles what it forwards)."""

    def checkpoint(self, step: int, reason: str) -> None:
        """Snapshot the checkpoint directory now as the checkpoint of `step`; upload later."""


class TrainingSession(abc.ABC):
    """Base class of a training job: subclass it and override `train()`.

    The agent builds the session in a child process on the instance and calls `train()` once
    per attempt. Every attempt starts on a fresh instance: when the job is resuming,
    `checkpoint_dir` already holds the files of the newest complete checkpoint and
    `resume_step` is its step; otherwise `checkpoint_dir` is empty and `resume_step` is None.

    The contract:
    - write the files of a checkpoint into `checkpoint_dir`, then call
      `self.save_checkpoint(step)`. The call snapshots the directory at once (a cheap
      private copy: unchanged files are hard-linked) and returns; the upload to S3 runs in the
      background while training goes on. Write files atomically (temporary name, then rename)
      if a crash between two files must not mix two steps.
    - check `self.interruption_requested` in the loop (every step is cheap). When it is True
      the instance will be reclaimed in about two minutes: write a checkpoint, call
      `save_checkpoint(step)` and return from `train()`. The agent then waits for the upload,
      tells the control plane (`AgentPreempted`) and the next instance resumes from exactly
      that step: no work is lost.
    - `self.checkpoint_requested` is True after a rebalance recommendation (the instance is
      at elevated risk); save a checkpoint soon and carry on. It is cleared by
      `save_checkpoint`.
    - call `self.report(step, loss=..., accuracy=...)` as often as you like; it is cheap and
      throttled, and feeds heartbeats, progress and the ETA (set `self.total_steps`).
    - files left in `output_dir` when `train()` returns are uploaded as the job's outputs.
    - an exception from `train()` fails the job; its traceback is in the job's log.
    - returning from `train()` after an interruption notice always counts as "interrupted":
      the next attempt resumes from the newest checkpoint (and, if the work was in fact done,
      simply finishes again from there).

    Do not override `__init__`; do set-up at the start of `train()`, or in `prepare()`.
    `on_interruption` is called once, from a background thread, when the notice arrives: keep
    it short.

    Warm start (the default; `TrainingEnvVar(warm_start=False)` opts out): on a replacement
    instance the agent starts the session process, imports the entry point and calls
    `prepare()` while it waits for the previous instance's last checkpoint; only then is the
    checkpoint restored into `checkpoint_dir`, `resume_step` set and `train()` called. So
    `prepare()` may build what does not depend on the checkpoint (the model, the data
    loaders); it must not read `checkpoint_dir` or `resume_step`. The notice reaches a
    session later than EC2 gives it, while its replacement warms up (docs/agent.md).

    Example::

        import json
        from respot import TrainingSession

        class Counter(TrainingSession):
            def train(self) -> None:
                state = self.checkpoint_dir / "state.json"
                step = json.loads(state.read_text())["step"] if self.resume_step else 0
                self.total_steps = int(self.hparams.get("steps", 1000))
                while step < self.total_steps:
                    step += 1                      # ... one step of training ...
                    self.report(step, loss=1.0 / step)
                    if step % 100 == 0 or self.interruption_requested:
                        state.write_text(json.dumps({"step": step}))
                        self.save_checkpoint(step)
                        if self.interruption_requested:
                            return                 # resumed on the next instance
                (self.output_dir / "result.json").write_text(json.dumps({"step": step}))
    """

    def __init__(
        self,
        *,
        checkpoint_dir: Path,
        data_dir: Path,
        output_dir: Path,
        hparams: dict[str, Any] | None = None,
        seed: int = 0,
        job_id: str = "local",
        attempt: int = 1,
        resume_step: int | None = None,
        host: SessionHost | None = None,
    ) -> None:
        self.checkpoint_dir = Path(checkpoint_dir)
        self.data_dir = Path(data_dir)
        self.output_dir = Path(output_dir)
        self.hparams: dict[str, Any] = dict(hparams or {})
        self.seed = seed
        self.job_id = job_id
        self.attempt = attempt
        self.resume_step = resume_step
        self.total_steps: int | None = None
        # The newest step given to report() or save_checkpoint(), and the newest checkpoint.
        self.last_step: int | None = resume_step
        self.last_checkpoint_step: int | None = resume_step
        self._host = host
        self._lock = threading.Lock()
        self._notice: str | None = None
        self._checkpoint_requested = False
        for d in (self.checkpoint_dir, self.output_dir):
            d.mkdir(parents=True, exist_ok=True)

    # ---- what the researcher overrides -------------------------------------------------------

    @abc.abstractmethod
    def train(self) -> None:
        """Run (or resume) training; see the class docstring for the contract."""

    def prepare(self) -> None:  # noqa: B027 - an optional hook
        """Called once before `train()`, before the checkpoint is restored (warm start).

        Build here what does not depend on the checkpoint (the model, the data); do not read
        `checkpoint_dir` or `resume_step` here. The default does nothing.
        """

    def on_interruption(self, notice: str) -> None:  # noqa: B027 - an optional hook
        """Called once, from a background thread, when an interruption notice arrives.

        `notice` is "spot-interruption" or "stop". The default does nothing; the loop's check
        of `interruption_requested` is what matters.
        """

    # ---- what the researcher calls -----------------------------------------------------------

    def report(self, step: int, **metrics: float) -> None:
        """Record the current step and metrics (cheap: the agent throttles what it sends)."""
        clean: dict[str, float] = {}
        for name, value in metrics.items():
            number = float(value)
            if math.isfinite(number):
                clean[name] = number
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        if self._host is not None:
            self._host.report(step, self.total_steps, clean)

    def save_checkpoint(self, step: int) -> None:
        """Mark the current contents of `checkpoint_dir` as the checkpoint of `step`.

        Takes a consistent snapshot now and returns; the upload happens in the background.
        """
        with self._lock:
            reason = "notice" if (self._notice or self._checkpoint_requested) else "periodic"
            self._checkpoint_requested = False
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        self.last_checkpoint_step = step
        if self._host is not None:
            self._host.checkpoint(step, reason)

    @property
    def interruption_requested(self) -> bool:
        """True once an interruption notice (spot interruption or stop) arrived."""
        return self._notice is not None

    @property
    def interruption_notice(self) -> str | None:
        """The notice that arrived ("spot-interruption" or "stop"), or None."""
        return self._notice

    @property
    def checkpoint_requested(self) -> bool:
        """True after a rebalance recommendation until the next `save_checkpoint`."""
        return self._checkpoint_requested

    # ---- what the agent calls ----------------------------------------------------------------

    def request_interruption(self, notice: str = "stop") -> None:
        """Make `interruption_requested` True and call `on_interruption` (first notice only)."""
        with self._lock:
            if self._notice is not None:
                return
            self._notice = notice
        try:
            self.on_interruption(notice)
        except Exception:
            print("respot: on_interruption raised; training goes on:", file=sys.stderr)
            traceback.print_exc()

    def request_checkpoint(self) -> None:
        """Make `checkpoint_requested` True (a rebalance recommendation arrived)."""
        with self._lock:
            self._checkpoint_requested = True

    def resume_from(self, step: int | None) -> None:
        """Set the step the restored checkpoint holds (warm start: known after `prepare()`)."""
        self.resume_step = step
        self.last_step = step if self.last_step is None else max(self.last_step, step or 0)
        self.last_checkpoint_step = step
