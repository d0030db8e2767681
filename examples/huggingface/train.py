"""A Hugging Face `Trainer` job, run by respot as it is (docs/integrations.md).

A tiny regression model built here (nothing downloaded), trained with `Trainer`: checkpoints
go to $RESPOT_CHECKPOINT_DIR every --save-steps steps; `RespotCallback` reports progress,
tells respot when each checkpoint is complete, and on the notice makes the Trainer save at
the end of the step and stop; `last_checkpoint()` resumes. Deterministic on CPU.

`--jit-checkpoint` runs it without the callback: `TrainingArguments(enable_jit_checkpoint=True)`
alone saves on SIGTERM (Hugging Face's own handler, 3 s after the signal), the script exits 0,
and respot uploads the directory as it is then (docs/commands.md, rule 2); a three-line
callback only reports the step (`respot.report`), so that respot knows where the job is.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer, TrainingArguments, set_seed

from respot.integrations.huggingface import RespotCallback, last_checkpoint


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        )

    def forward(
        self, x: torch.Tensor, labels: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        out = self.net(x).squeeze(-1)
        loss = torch.nn.functional.mse_loss(out, labels) if labels is not None else out.sum()
        return {"loss": loss, "logits": out}


class Data(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(1234)
        self.x = torch.randn(512, 16, generator=gen)
        self.y = (self.x @ torch.randn(16, 1, generator=gen)).squeeze(1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--save-steps", type=int, default=50)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="slow it down (tests)")
    parser.add_argument(
        "--jit-checkpoint", action="store_true", help="HF's enable_jit_checkpoint, no callback"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    ckpt = os.environ.get("RESPOT_CHECKPOINT_DIR", "checkpoints")
    out = Path(os.environ.get("RESPOT_OUTPUT_DIR", "output"))
    training = TrainingArguments(
        output_dir=ckpt,
        max_steps=args.steps,
        per_device_train_batch_size=32,
        learning_rate=1e-2,
        save_strategy="steps",
        save_steps=args.save_steps,
        save_total_limit=2,
        logging_steps=10,
        report_to=[],
        seed=0,
        data_seed=0,
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        enable_jit_checkpoint=args.jit_checkpoint,
    )
    respot_cb = RespotCallback()
    callbacks: list[object] = [] if args.jit_checkpoint else [respot_cb]
    if args.jit_checkpoint:
        from transformers import TrainerCallback

        import respot

        class Progress(TrainerCallback):  # progress only: saving is HF's JIT checkpoint's
            def on_step_end(self, a: object, state: Any, *rest: object, **k: object) -> None:
                respot.report(state.global_step, total_steps=state.max_steps)

        callbacks.append(Progress())
    if args.step_seconds:
        from transformers import TrainerCallback

        class Slow(TrainerCallback):
            def on_step_end(self, *a: object, **k: object) -> None:
                import time

                time.sleep(args.step_seconds)

        callbacks.append(Slow())
    set_seed(0)  # the model's initial weights (a resumed run loads its checkpoint's)
    trainer = Trainer(model=Tiny(), args=training, train_dataset=Data(), callbacks=callbacks)
    trainer.train(resume_from_checkpoint=last_checkpoint())
    stopped_early = args.jit_checkpoint and trainer.state.global_step < args.steps
    if respot_cb.stopped_by_notice or stopped_early:
        print(f"notice: saved step {trainer.state.global_step}", flush=True)
        return 0
    out.mkdir(parents=True, exist_ok=True)
    params = b"".join(p.detach().numpy().tobytes() for p in trainer.model.parameters())
    digest = hashlib.sha256(params).hexdigest()
    (out / "weights.sha256").write_text(digest + "\n")
    print(f"done: {trainer.state.global_step} steps, weights {digest[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
