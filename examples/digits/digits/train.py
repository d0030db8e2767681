"""`DigitsSession`: a deterministic, resumable PyTorch training job on CPU.

Run any number of times with interruptions in between, it ends with bit-identical weights
to an uninterrupted run: one thread, deterministic algorithms, and a checkpoint that holds
everything the next step depends on (model, optimizer, every RNG state, the position in the
data order), written atomically.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from typing import Any

import numpy as np
import torch
from torch import nn

from respot import TrainingSession

DEFAULTS: dict[str, Any] = {
    # About 35 s on one CPU thread (3,150 steps of ~11 ms); see docs/agent.md.
    "epochs": 70,
    "batch_size": 32,
    "lr": 1e-3,
    "hidden": 1024,
    "dropout": 0.1,
    "checkpoint_every": 300,
    "test_fraction": 0.2,
}
STATE_FILE = "state.pt"


def build_model(hidden: int, dropout: float) -> nn.Module:
    """64 pixels -> two hidden layers -> 10 classes."""
    return nn.Sequential(
        nn.Linear(64, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Dropout(dropout),
        nn.Linear(hidden, 10),
    )


def weights_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        tensor = state_dict[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(tensor.dtype).encode())
        h.update(str(tuple(tensor.shape)).encode())
        h.update(tensor.numpy().tobytes())
    return h.hexdigest()


class DigitsSession(TrainingSession):
    """Classify 8x8 digits with an MLP; checkpoints every `checkpoint_every` steps.

    `prepare()` does everything that does not depend on the checkpoint (data, split, model,
    optimizer), so with warm start it runs while the replacement waits for the hand-off and
    `train()` only loads the restored state and trains. The same order runs with or without
    warm start, so the weights do not depend on it.
    """

    def prepare(self) -> None:
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(1)
        hp = {**DEFAULTS, **self.hparams}
        self.epochs, self.batch_size = int(hp["epochs"]), int(hp["batch_size"])
        self.checkpoint_every = int(hp["checkpoint_every"])

        data = np.load(self.data_dir / "digits" / "digits.npz")
        x_all, y_all = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
        order = np.random.default_rng(self.seed).permutation(len(y_all))
        n_test = int(len(order) * float(hp["test_fraction"]))
        test_idx, train_idx = torch.from_numpy(order[:n_test]), torch.from_numpy(order[n_test:])
        self.x_train, self.y_train = x_all[train_idx], y_all[train_idx]
        self.x_test, self.y_test = x_all[test_idx], y_all[test_idx]
        self.steps_per_epoch = math.ceil(len(self.y_train) / self.batch_size)
        self.total_steps = self.epochs * self.steps_per_epoch

        torch.manual_seed(self.seed)
        self.model = build_model(int(hp["hidden"]), float(hp["dropout"]))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=float(hp["lr"]))
        self.data_order = torch.Generator().manual_seed(self.seed + 1)

    def train(self) -> None:
        model, optimizer, data_order = self.model, self.optimizer, self.data_order
        x_train, y_train, x_test, y_test = self.x_train, self.y_train, self.x_test, self.y_test
        epochs, batch_size = self.epochs, self.batch_size
        steps_per_epoch, checkpoint_every = self.steps_per_epoch, self.checkpoint_every
        loss_fn = nn.CrossEntropyLoss()
        epoch, batch_index, step = 0, 0, 0
        perm: torch.Tensor | None = None
        last_loss = float("nan")  # none yet in this attempt (e.g. resumed at an epoch's end)

        if self.resume_step is not None:
            state = torch.load(self.checkpoint_dir / STATE_FILE, weights_only=True)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            data_order.set_state(state["data_order"])
            torch.set_rng_state(state["torch_rng"])
            np.random.set_state(_numpy_state_from(state["numpy_rng"]))
            random.setstate(_python_state_from(state["python_rng"]))
            epoch, batch_index, step = state["epoch"], state["batch_index"], state["step"]
            perm = state["perm"]
            print(f"resumed at step {step} (epoch {epoch}, batch {batch_index})", flush=True)

        def save(step: int) -> None:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "data_order": data_order.get_state(),
                "torch_rng": torch.get_rng_state(),
                "numpy_rng": _numpy_state_to(np.random.get_state()),
                "python_rng": _python_state_to(random.getstate()),
                "epoch": epoch,
                "batch_index": batch_index,
                "step": step,
                "perm": perm,
            }
            tmp = self.checkpoint_dir / (STATE_FILE + ".tmp")
            torch.save(state, tmp)
            os.replace(tmp, self.checkpoint_dir / STATE_FILE)  # atomic: old or new, never half
            self.save_checkpoint(step)

        while epoch < epochs:
            if perm is None:
                perm = torch.randperm(len(y_train), generator=data_order)
            model.train()
            while batch_index < steps_per_epoch:
                ids = perm[batch_index * batch_size : (batch_index + 1) * batch_size]
                optimizer.zero_grad()
                loss = loss_fn(model(x_train[ids]), y_train[ids])
                loss.backward()
                optimizer.step()
                batch_index += 1
                step += 1
                last_loss = loss.item()
                self.report(step, loss=last_loss, epoch=float(epoch))
                if (
                    step % checkpoint_every == 0
                    or self.interruption_requested
                    or self.checkpoint_requested
                ):
                    save(step)
                    if self.interruption_requested:
                        print(f"interrupted: saved step {step}, stopping", flush=True)
                        return
            epoch, batch_index, perm = epoch + 1, 0, None
            accuracy = _accuracy(model, x_test, y_test)
            self.report(step, loss=last_loss, accuracy=accuracy, epoch=float(epoch))
            if epoch % 10 == 0 or epoch == epochs:
                print(f"epoch {epoch} step {step} loss {last_loss:.4f} acc {accuracy:.4f}")

        final = model.state_dict()
        torch.save(final, self.output_dir / "model.pt")
        digest = weights_digest(final)
        (self.output_dir / "weights.sha256").write_text(digest + "\n")
        metrics = {"step": step, "accuracy": _accuracy(model, x_test, y_test), "sha256": digest}
        (self.output_dir / "metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
        print(f"done: step {step}, accuracy {metrics['accuracy']:.4f}, weights {digest[:16]}")


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(dim=1) == y).float().mean().item())


# RNG states as plain values, so that torch.load(weights_only=True) reads them back.
def _numpy_state_to(state: Any) -> list[Any]:
    name, keys, pos, has_gauss, cached = state
    return [name, torch.from_numpy(np.asarray(keys).astype(np.int64)), pos, has_gauss, cached]


def _numpy_state_from(value: list[Any]) -> Any:
    name, keys, pos, has_gauss, cached = value
    return (name, keys.numpy().astype(np.uint32), int(pos), int(has_gauss), float(cached))


def _python_state_to(state: Any) -> list[Any]:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _python_state_from(value: list[Any]) -> Any:
    version, internal, gauss = value
    return (version, tuple(internal), gauss)
