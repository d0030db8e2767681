"""Tiny, fast sessions (no torch) that the agent tests run in real child processes.

`CountingSession` adds up the step numbers 1..steps; its checkpoint holds the step and the
running total, so a resumed run must end with the same total as an uninterrupted one.
"""

from __future__ import annotations

import json
import os
import threading
import time

from respot import TrainingSession


class CountingSession(TrainingSession):
    """Counts to `steps`, `sleep` seconds per step; checkpoints every `checkpoint_every`."""

    prepared: dict[str, object] | None = None

    def prepare(self) -> None:
        # What the session could see before train(): with warm start, no checkpoint yet.
        files = sorted(p.name for p in self.checkpoint_dir.iterdir())
        if self.hparams.get("prepare_reads_checkpoint") and "state.json" not in files:
            raise RuntimeError("prepare() expected the checkpoint to be restored already")
        self.prepared = {"checkpoint_files": files, "resume_step": self.resume_step}

    def train(self) -> None:
        steps = int(self.hparams.get("steps", 20))
        sleep = float(self.hparams.get("sleep", 0.0))
        if self.resume_step is not None:  # a resumed attempt may run faster (tests that wait)
            sleep = float(self.hparams.get("resumed_sleep", sleep))
        every = int(self.hparams.get("checkpoint_every", 5))
        fail_at = self.hparams.get("fail_at")
        ignore_notice = bool(self.hparams.get("ignore_notice", False))
        self.total_steps = steps
        state_file = self.checkpoint_dir / "state.json"
        # A large file that never changes: the second checkpoint must not send it again.
        constant = self.checkpoint_dir / "constant.bin"
        step, total = 0, 0
        if self.resume_step is not None:
            state = json.loads(state_file.read_text())
            step, total = state["step"], state["total"]
            print(f"resuming at step {step}", flush=True)
        else:
            constant.write_bytes(bytes(range(256)) * 1024)
        print(f"attempt {self.attempt} of {self.job_id}: from step {step}", flush=True)
        while step < steps:
            step += 1
            total += step
            if fail_at is not None and step == int(fail_at):
                (self.output_dir / "partial.txt").write_text(f"got to step {step}\n")
                raise ValueError(f"boom at step {step}")
            time.sleep(sleep)
            self.report(step, total=float(total))
            noticed = self.interruption_requested and not ignore_notice
            requested = self.checkpoint_requested
            if step % every == 0 or noticed or requested:
                tmp = state_file.with_suffix(".tmp")
                tmp.write_text(json.dumps({"step": step, "total": total}))
                os.replace(tmp, state_file)
                self.save_checkpoint(step)
                if requested and self.hparams.get("fast_after_requested_checkpoint"):
                    sleep = 0.0  # what the test waited for happened: finish at once
                if noticed:
                    print(f"interrupted ({self.interruption_notice}) at step {step}", flush=True)
                    return
        result = {
            "step": step,
            "total": total,
            "resumed_from": self.resume_step,
            "attempt": self.attempt,
            "hparams": self.hparams,
            "prepared": self.prepared,
            "resume_step_env": os.environ.get("RESPOT_RESUME_STEP"),
        }
        (self.output_dir / "result.json").write_text(json.dumps(result))
        names = self.hparams.get("echo_env", [])
        echoed = {
            name: os.environ.get(name) for name in [*names, "RESPOT_JOB_ID", "RESPOT_ATTEMPT"]
        }
        (self.output_dir / "env.json").write_text(json.dumps(echoed))
        (self.output_dir / "nested").mkdir(exist_ok=True)
        (self.output_dir / "nested" / "note.txt").write_text("done\n")


class LingeringSession(TrainingSession):
    """Returns from train() but leaves a non-daemon thread running, so the process lingers."""

    def train(self) -> None:
        threading.Thread(target=time.sleep, args=(3600,), daemon=False).start()
        self.report(1)
        (self.output_dir / "result.json").write_text(json.dumps({"step": 1}))
