"""The replay's job: `steps` steps paced by the clock, so that the work takes C real seconds.

Step k (counted from where this attempt resumed) ends `k * step_seconds` after training
began, whatever the machine's load: a step that ran late does not push the later ones (a
sleep per step would add the loop's overhead to every step, and the live job would need
more work than the simulator's). It checkpoints every `checkpoint_every` steps and at once
on a notice, and resumes from the checkpointed step. Shipped in respot, so the instance
needs no code upload.
"""

from __future__ import annotations

import json
import time

from respot.training.session import TrainingSession


class ReplaySession(TrainingSession):
    """Counts to `steps`, one every `step_seconds` of wall-clock time."""

    def train(self) -> None:
        steps = int(self.hparams.get("steps", 100))
        pause = float(self.hparams.get("step_seconds", 0.1))
        every = int(self.hparams.get("checkpoint_every", 10))
        self.total_steps = steps
        state = self.checkpoint_dir / "replay.json"
        first = json.loads(state.read_text())["step"] if state.exists() else 0
        began = time.monotonic()
        step = first
        while step < steps:
            if self.interruption_requested:
                self._save(step)
                return
            time.sleep(max(began + (step + 1 - first) * pause - time.monotonic(), 0.0))
            step += 1
            self.report(step)
            if step % every == 0 or self.checkpoint_requested:
                self._save(step)
        (self.output_dir / "replay.json").write_text(json.dumps({"steps": step}))

    def _save(self, step: int) -> None:
        tmp = self.checkpoint_dir / "replay.json.tmp"
        tmp.write_text(json.dumps({"step": step}))
        tmp.replace(self.checkpoint_dir / "replay.json")
        self.save_checkpoint(step)
