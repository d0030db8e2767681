"""The boot benchmark's session: imports the job's extra package when it has one, then counts."""

from __future__ import annotations

import json
import time

from respot import TrainingSession


class BootSession(TrainingSession):
    """A few cheap steps with a checkpoint every `checkpoint_every`; resumes from it."""

    def train(self) -> None:
        if self.hparams.get("package"):
            __import__(str(self.hparams["package"]))
        state_file = self.checkpoint_dir / "state.json"
        step = json.loads(state_file.read_text())["step"] if state_file.exists() else 0
        if self.hparams.get("ballast_mb"):  # a checkpoint worth restoring
            ballast = self.checkpoint_dir / "ballast.bin"
            if not ballast.exists():
                ballast.write_bytes(b"\x5a" * (2**20 * int(self.hparams["ballast_mb"])))
        self.total_steps = int(self.hparams.get("steps", 100))
        every = int(self.hparams.get("checkpoint_every", 20))
        while step < self.total_steps:
            if self.interruption_requested:
                break
            step += 1
            time.sleep(float(self.hparams.get("step_seconds", 0.02)))
            self.report(step, loss=1.0 / step)
            if step % every == 0:
                state_file.write_text(json.dumps({"step": step}))
                self.save_checkpoint(step)
        state_file.write_text(json.dumps({"step": step}))
        self.save_checkpoint(step)
