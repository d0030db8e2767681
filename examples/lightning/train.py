"""A Lightning job, run by respot as it is (docs/integrations.md).

A tiny regression model built here (nothing downloaded), trained by `lightning.Trainer` with
`RespotCallback`: `last.ckpt` in $RESPOT_CHECKPOINT_DIR every --save-every steps and on the
notice, which also stops the Trainer; `last_checkpoint()` resumes.

Lightning 2.6 resumes a checkpoint taken mid-epoch by starting that epoch's DataLoader from
its beginning (unless it is a `StatefulDataLoader`), so a model that reads its batches from
the loader would see some twice after a resume. Here each step's batch is chosen by the
global step (the loader only paces the steps), so an interrupted run ends with the weights of
an uninterrupted one, bit for bit, on CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import torch
from lightning import LightningModule, Trainer, seed_everything

from respot.integrations.lightning import RespotCallback, last_checkpoint


class Tiny(LightningModule):
    def __init__(self, step_seconds: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        )
        gen = torch.Generator().manual_seed(1234)
        self.x = torch.randn(512, 16, generator=gen)
        self.y = (self.x @ torch.randn(16, 1, generator=gen)).squeeze(1)
        self.step_seconds = step_seconds

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        rows = torch.arange(self.global_step * 32, self.global_step * 32 + 32) % 512
        loss = torch.nn.functional.mse_loss(self.net(self.x[rows]).squeeze(1), self.y[rows])
        self.log("loss", loss)
        if self.step_seconds:
            time.sleep(self.step_seconds)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-every", type=int, default=50)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="slow it down (tests)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seed_everything(0, verbose=False)
    out = Path(os.environ.get("RESPOT_OUTPUT_DIR", "output"))
    steps = torch.utils.data.DataLoader(torch.arange(args.steps), batch_size=1)
    respot_cb = RespotCallback(every_n_steps=args.save_every)
    trainer = Trainer(
        max_steps=args.steps,
        callbacks=[respot_cb],
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        devices=1,
    )
    model = Tiny(args.step_seconds)
    trainer.fit(model, steps, ckpt_path=last_checkpoint())
    if respot_cb.stopped_by_notice:
        print(f"notice: saved step {trainer.global_step}", flush=True)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    digest = hashlib.sha256(params).hexdigest()
    (out / "weights.sha256").write_text(digest + "\n")
    print(f"done: {trainer.global_step} steps, weights {digest[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
