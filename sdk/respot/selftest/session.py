"""The self-test's training job: the smallest session that checkpoints and resumes exactly.

It counts steps (a sleep each), checkpoints every `checkpoint_every` steps and at once when a
notice arrives, and on resume continues from the checkpointed step. It ships inside the
`respot` package, so the instance needs no code upload and no packages beyond respot's.
"""

from __future__ import annotations

import json
import time

from respot.training.session import TrainingSession


class SelftestSession(TrainingSession):
    """Counts to `steps`, `step_seconds` apart; the state is the step itself."""

    def train(self) -> None:
        steps = int(self.hparams.get("steps", 240))
        pause = float(self.hparams.get("step_seconds", 1.0))
        every = int(self.hparams.get("checkpoint_every", 30))
        self.total_steps = steps
        state = self.checkpoint_dir / "selftest.json"
        step = json.loads(state.read_text())["step"] if state.exists() else 0
        print(f"selftest: attempt {self.attempt} starts at step {step} of {steps}", flush=True)
        while step < steps:
            if self.interruption_requested:
                self._save(step)
                print(f"selftest: notice at step {step}; checkpointed, stopping", flush=True)
                return
            time.sleep(pause)
            step += 1
            self.report(step, progress=step / steps)
            if step % every == 0 or self.checkpoint_requested:
                self._save(step)
        (self.output_dir / "selftest.json").write_text(json.dumps({"steps": step}))
        print(f"selftest: done at step {step}", flush=True)

    def _save(self, step: int) -> None:
        tmp = self.checkpoint_dir / "selftest.json.tmp"
        tmp.write_text(json.dumps({"step": step}))
        tmp.replace(self.checkpoint_dir / "selftest.json")
        self.save_checkpoint(step)
