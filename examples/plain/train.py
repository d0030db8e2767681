"""A plain PyTorch script, run by respot as it is: `command: [python, train.py, ...]`.

What makes it survive spot interruptions (docs/commands.md):
- it saves into $RESPOT_CHECKPOINT_DIR (a local directory when run on a laptop) and, at
  start, resumes from what it finds there;
- on SIGTERM (the notice) it finishes the step it is in, saves, and exits 0 (respot uploads
  what a clean exit after the notice leaves; `respot.checkpoint_saved` there makes the upload
  start at once instead of after Python's exit, which takes seconds with torch loaded);
- every --save-every steps it saves and calls `respot.checkpoint_saved(step)`, so respot
  uploads a complete checkpoint while it trains (never one half-written).
`respot.report` shows progress; both calls do nothing outside a respot job.

Deterministic on CPU: the data comes from a seeded generator, batches from the step number,
so an interrupted run ends with the same weights, bit for bit, as an uninterrupted one.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import threading
from pathlib import Path

import torch

try:
    import respot
except ImportError:  # run without respot installed: no reports, the same training
    respot = None

stop = threading.Event()  # set by SIGTERM (respot's notice), acted on at a step boundary


def on_sigterm(signum: int, frame: object) -> None:
    stop.set()


def save(directory: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """Write aside, then rename: the directory never holds half a checkpoint file."""
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / "state.pt.partial"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, partial)
    os.replace(partial, directory / "state.pt")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="slow it down (tests)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ckpt_dir = Path(os.environ.get("RESPOT_CHECKPOINT_DIR", "checkpoint"))
    out_dir = Path(os.environ.get("RESPOT_OUTPUT_DIR", "output"))
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(512, 16, generator=gen)
    y = (x @ torch.randn(16, 1, generator=gen)).squeeze(1) + 0.1 * torch.randn(512, generator=gen)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = 0
    if (ckpt_dir / "state.pt").exists():
        state = torch.load(ckpt_dir / "state.pt")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
        print(f"resumed at step {step}", flush=True)
    while step < args.steps:
        if stop.is_set():
            save(ckpt_dir, step, model, opt)
            if respot is not None:  # uploaded now, not after the interpreter's teardown
                respot.checkpoint_saved(step)
            print(f"notice: saved step {step}", flush=True)
            return 0
        batch = torch.arange(step * 32, step * 32 + 32) % 512
        loss = torch.nn.functional.mse_loss(model(x[batch]).squeeze(1), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if respot is not None:
            respot.report(step, total_steps=args.steps, loss=loss.item())
        if step % args.save_every == 0 and step < args.steps:
            save(ckpt_dir, step, model, opt)
            if respot is not None:
                respot.checkpoint_saved(step)
        if args.step_seconds:
            import time

            time.sleep(args.step_seconds)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), out_dir / "model.pt")
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    (out_dir / "weights.sha256").write_text(digest.hexdigest() + "\n")
    print(f"done: {step} steps, weights {digest.hexdigest()[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
