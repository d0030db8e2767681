"""Hugging Face `Trainer` in a command job (docs/integrations.md).

    args = TrainingArguments(output_dir=os.environ["RESPOT_CHECKPOINT_DIR"],
                             save_strategy="steps", save_steps=100, save_total_limit=2, ...)
    respot_cb = RespotCallback()
    trainer = Trainer(model=..., args=args, train_dataset=..., callbacks=[respot_cb])
    trainer.train(resume_from_checkpoint=last_checkpoint())
    if respot_cb.stopped_by_notice:
        raise SystemExit(0)   # interrupted: the replacement resumes; skip the final save

`RespotCallback` reports each logged step and its numbers (`respot.report`), says each
checkpoint the Trainer finished saving is complete (`respot.checkpoint_saved`, from the
main process only), and on the notice (the job's stop signal, or the notice file appearing)
makes the Trainer save at the end of the step it is in and stop.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from respot.commands import channel, contract

_SIGNALS = ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP")


def last_checkpoint(directory: str | os.PathLike[str] | None = None) -> str | None:
    """The newest `checkpoint-N` in RESPOT_CHECKPOINT_DIR (or `directory`), or None."""
    root = directory or os.environ.get(contract.ENV_CHECKPOINT_DIR)
    if not root or not Path(root).is_dir():
        return None
    found: str | None = get_last_checkpoint(str(root))
    return found


class RespotCallback(TrainerCallback):
    """Progress to respot, checkpoints said complete, a save and a stop on the notice."""

    def __init__(self, stop_signal: str | None = None) -> None:
        self.stop_signal = stop_signal or os.environ.get("RESPOT_STOP_SIGNAL", "SIGTERM")
        self.notice = threading.Event()
        self.stopped_by_notice = False
        notice_file = os.environ.get(contract.ENV_NOTICE_FILE)
        self._notice_file = Path(notice_file) if notice_file else None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # The Trainer runs in the main thread, where signal handlers are set.
        if self.stop_signal in _SIGNALS and threading.current_thread() is threading.main_thread():
            signal.signal(getattr(signal, self.stop_signal), self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.notice.set()

    def _noticed(self) -> bool:
        notice_file = self._notice_file
        if not self.notice.is_set() and notice_file is not None and notice_file.exists():
            self.notice.set()
        return self.notice.is_set()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        channel.report(state.global_step, total_steps=state.max_steps or None)
        if self._noticed():
            control.should_save = True  # the Trainer saves this step, then stops
            control.should_training_stop = True
            self.stopped_by_notice = True
        return control

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
    ) -> None:
        numbers = {
            k: float(v)
            for k, v in (logs or {}).items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        channel.report(state.global_step, total_steps=state.max_steps or None, **numbers)

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            channel.checkpoint_saved(state.global_step)
