"""`RidgeSession`: softmax regression on the digits, trained by SGD with momentum (NumPy only).

Small enough for a sweep of 20 trials on a laptop CPU, yet a real search: the validation loss
depends on the learning rate, the L2 penalty and the batch size, and a bad learning rate shows
early (which is what the pruner is for). It reports `val_loss` every `eval_every` steps and is
resumable bit for bit: the checkpoint holds the weights, the momentum, the RNG state and the
step, written atomically.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from respot import TrainingSession

DEFAULTS: dict[str, Any] = {
    "steps": 600,
    "lr": 0.05,
    "l2": 1e-4,
    "batch_size": 64,
    "momentum": 0.9,
    "eval_every": 50,
    "checkpoint_every": 100,
    "step_sleep": 0.0,  # seconds per step: lets a test hold a trial long enough to interrupt
}
STATE = "state.npz"


def load_digits_split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scaled digits, split 80/20 with a fixed permutation."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float64) / 16.0
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    return x[:cut], y[:cut], x[cut:], y[cut:]


def softmax_loss(
    w: np.ndarray, x: np.ndarray, y: np.ndarray, l2: float
) -> tuple[float, np.ndarray]:
    """Mean cross-entropy plus the L2 penalty, and its gradient."""
    logits = x @ w
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    n = len(y)
    loss = -np.log(p[np.arange(n), y] + 1e-12).mean() + 0.5 * l2 * float((w * w).sum())
    p[np.arange(n), y] -= 1.0
    grad = x.T @ p / n + l2 * w
    return float(loss), grad


class RidgeSession(TrainingSession):
    """The sweep example's session; see the module docstring."""

    def train(self) -> None:
        import time

        hp = {**DEFAULTS, **self.hparams}
        steps, eval_every = int(hp["steps"]), int(hp["eval_every"])
        x_train, y_train, x_val, y_val = load_digits_split(self.seed)
        x_train = np.hstack([x_train, np.ones((len(x_train), 1))])
        x_val = np.hstack([x_val, np.ones((len(x_val), 1))])
        path = self.checkpoint_dir / STATE
        if self.resume_step and path.exists():
            saved = np.load(path, allow_pickle=False)
            w, velocity, step = saved["w"], saved["velocity"], int(saved["step"])
            rng = np.random.default_rng()
            rng.bit_generator.state = json.loads(str(saved["rng"]))
        else:
            rng = np.random.default_rng(self.seed)
            w = np.zeros((x_train.shape[1], 10))
            velocity = np.zeros_like(w)
            step = 0
        self.total_steps = steps
        val_loss = float("nan")
        while step < steps:
            batch = rng.integers(0, len(x_train), size=int(hp["batch_size"]))
            _, grad = softmax_loss(w, x_train[batch], y_train[batch], float(hp["l2"]))
            velocity = float(hp["momentum"]) * velocity - float(hp["lr"]) * grad
            w = w + velocity
            step += 1
            if float(hp["step_sleep"]) > 0:
                time.sleep(float(hp["step_sleep"]))
            if step % eval_every == 0 or step == steps:
                val_loss, _ = softmax_loss(w, x_val, y_val, 0.0)
                if not np.isfinite(val_loss):
                    val_loss = 1e6  # diverged: report a large loss, the pruner stops it
                accuracy = float(((x_val @ w).argmax(axis=1) == y_val).mean())
                self.report(step, val_loss=val_loss, val_accuracy=accuracy)
            if step % int(hp["checkpoint_every"]) == 0 or self.interruption_requested:
                tmp = self.checkpoint_dir / f".{STATE}.tmp.npz"
                np.savez(
                    tmp,
                    w=w,
                    velocity=velocity,
                    step=step,
                    rng=json.dumps(rng.bit_generator.state),
                )
                os.replace(tmp, path)
                self.save_checkpoint(step)
                if self.interruption_requested:
                    return
        (self.output_dir / "result.json").write_text(
            json.dumps({"val_loss": val_loss, "steps": steps, "hparams": hp}, indent=2)
        )
