"""Lightning in a command job (docs/integrations.md).

    respot_cb = RespotCallback(every_n_steps=100)
    trainer = lightning.Trainer(max_steps=..., callbacks=[respot_cb], enable_checkpointing=False)
    trainer.fit(model, data, ckpt_path=last_checkpoint())
    if respot_cb.stopped_by_notice:
        raise SystemExit(0)   # interrupted: the replacement resumes; skip the final save

`RespotCallback` reports each step and the logged metrics (`respot.report`); every
`every_n_steps`, and on the notice (the job's stop signal, or the notice file appearing) at
the end of the batch it is in, it saves `last.ckpt` in RESPOT_CHECKPOINT_DIR (written aside,
then renamed) and says it is complete (`respot.checkpoint_saved`, from global rank 0), and on
the notice stops the Trainer. It takes the stop signal from Lightning's own handler (which
would raise `SIGTERMException` instead of saving), for the time of `fit`.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from respot.commands import channel, contract

CHECKPOINT_NAME = "last.ckpt"
_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP")


def last_checkpoint(directory: str | os.PathLike[str] | None = None) -> str | None:
    """RESPOT_CHECKPOINT_DIR/last.ckpt (or in `directory`) if there is one, else None."""
    root = directory or os.environ.get(contract.ENV_CHECKPOINT_DIR)
    if not root:
        return None
    path = Path(root) / CHECKPOINT_NAME
    return str(path) if path.is_file() else None


class RespotCallback(Callback):
    """Progress to respot, `last.ckpt` saved and said complete, a save and a stop on the notice."""

    def __init__(self, every_n_steps: int | None = None, stop_signal: str | None = None) -> None:
        self.every_n_steps = every_n_steps
        self.stop_signal = stop_signal or os.environ.get("RESPOT_STOP_SIGNAL", "SIGTERM")
        self.notice = threading.Event()
        self.stopped_by_notice = False
        notice_file = os.environ.get(contract.ENV_NOTICE_FILE)
        self._notice_file = Path(notice_file) if notice_file else None
        self._previous: Any = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        # After Lightning registered its handlers (fit's setup); put back in on_train_end.
        if self.stop_signal in _SIGNALS and threading.current_thread() is threading.main_thread():
            sig = getattr(signal, self.stop_signal)
            self._previous = (sig, signal.signal(sig, self._on_signal))

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if self._previous is not None:
            signal.signal(*self._previous)
            self._previous = None

    def _on_signal(self, signum: int, frame: object) -> None:
        self.notice.set()

    def _noticed(self) -> bool:
        notice_file = self._notice_file
        if not self.notice.is_set() and notice_file is not None and notice_file.exists():
            self.notice.set()
        return self.notice.is_set()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = int(trainer.global_step)
        numbers = {}
        for key, value in trainer.callback_metrics.items():
            try:
                numbers[str(key)] = float(value)
            except (TypeError, ValueError):
                continue
        channel.report(step, total_steps=trainer.max_steps if trainer.max_steps > 0 else None,
                       **numbers)  # fmt: skip
        noticed = self._noticed()
        periodic = bool(self.every_n_steps) and step % (self.every_n_steps or 1) == 0
        if noticed or periodic:
            self.save(trainer, step)
        if noticed:
            trainer.should_stop = True
            self.stopped_by_notice = True

    def save(self, trainer: Any, step: int) -> None:
        """`last.ckpt` written aside then renamed, then said complete (rank 0 only)."""
        root = os.environ.get(contract.ENV_CHECKPOINT_DIR)
        if not root:
            return
        final = Path(root) / CHECKPOINT_NAME
        partial = final.with_name(final.name + ".partial")
        trainer.save_checkpoint(str(partial))  # every rank takes part; rank 0 writes
        if trainer.is_global_zero:
            os.replace(partial, final)
            channel.checkpoint_saved(step)
