"""A fast deterministic session: counts steps, sleeps a little per step, checkpoints a sum."""

from __future__ import annotations

import json
import os
import sys
import time

from respot import TrainingSession


class CountingSession(TrainingSession):
    """Adds step * seed to a total, one step at a time; the total is its 'weights'.

    Each step takes at least `step_seconds` (`resumed_step_seconds` once a checkpoint was
    restored), so `steps * step_seconds` bounds from below how long a first attempt takes.
    """

    def train(self) -> None:
        total_steps = int(self.hparams.get("steps", 200))
        delay = float(self.hparams.get("step_seconds", 0.02))
        every = int(self.hparams.get("checkpoint_every", 50))
        self.total_steps = total_steps
        state_file = self.checkpoint_dir / "state.json"
        state = {"step": 0, "total": 0}
        if state_file.exists():
            state = json.loads(state_file.read_text())
            # A resumed attempt may run faster: a test sizes the work so that the attempts it
            # interrupts cannot finish it, without waiting as long for the last one.
            delay = float(self.hparams.get("resumed_step_seconds", delay))
        # Echo what the environment carried, for the test of inert data.
        print("ENV", json.dumps({k: v for k, v in os.environ.items() if k.startswith("E2E_")}))
        print("HPARAMS", json.dumps(self.hparams), flush=True)
        sys.stdout.flush()
        while state["step"] < total_steps:
            if self.interruption_requested:
                self._save(state)
                return
            state["step"] += 1
            state["total"] += state["step"] * (self.seed + 1)
            time.sleep(delay)
            self.report(state["step"], total=float(state["total"]))
            if state["step"] % every == 0 or self.checkpoint_requested:
                self._save(state)
        (self.output_dir / "weights.sha256").write_text(f"{state['total']}\n")
        (self.output_dir / "env.json").write_text(
            json.dumps({k: v for k, v in os.environ.items() if k.startswith("E2E_")})
        )
        (self.output_dir / "hparams.json").write_text(json.dumps(self.hparams))

    def _save(self, state: dict[str, int]) -> None:
        ballast_mb = int(self.hparams.get("ballast_mb", 0))
        if ballast_mb:
            # A big file that changes with every checkpoint, so that uploads take a while.
            block = (f"step {state['step']} ".encode() * 64)[:1024]
            (self.checkpoint_dir / "ballast.bin").write_bytes(block * (1024 * ballast_mb))
        tmp = self.checkpoint_dir / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        tmp.replace(self.checkpoint_dir / "state.json")
        self.save_checkpoint(state["step"])


class FailingSession(TrainingSession):
    """Trains a few steps, then raises."""

    def train(self) -> None:
        for step in range(1, 6):
            self.report(step)
            time.sleep(0.05)
        print("about to fail", flush=True)
        raise ZeroDivisionError("the loss diverged at step 5")
