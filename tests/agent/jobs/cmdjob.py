"""A command job's script for the agent tests (stdlib only): counts steps, checkpoints into
$RESPOT_CHECKPOINT_DIR as a researcher's script would, and misbehaves on request.

--mode normal:    on SIGTERM, save at the step boundary and exit 0
--mode ignore:    ignore SIGTERM and keep training (killed at the last safe moment)
--mode fail:      exit 3 after --fail-at steps, with a message
--mode halfwrite: on SIGTERM, start writing a checkpoint, write half of it, and hang
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import respot

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--sleep", type=float, default=0.02)
parser.add_argument("--save-every", type=int, default=0)
parser.add_argument("--mode", default="normal")
parser.add_argument("--fail-at", type=int, default=3)
args = parser.parse_args()

ckpt = Path(os.environ["RESPOT_CHECKPOINT_DIR"])
out = Path(os.environ["RESPOT_OUTPUT_DIR"])
stop = threading.Event()


def on_term(signum, frame):
    stop.set()


signal.signal(signal.SIGTERM, signal.SIG_IGN if args.mode == "ignore" else on_term)


def save(step, total):
    partial = ckpt / "state.json.partial"
    partial.write_text(json.dumps({"step": step, "total": total}))
    os.replace(partial, ckpt / "state.json")


step, total = 0, 0
if (ckpt / "state.json").exists():
    state = json.loads((ckpt / "state.json").read_text())
    step, total = state["step"], state["total"]
print(f"start step={step} resumed={os.environ['RESPOT_RESUMED']}", flush=True)
(out / "env.json").write_text(
    json.dumps({k: v for k, v in os.environ.items() if k.startswith("RESPOT_")})
)
while step < args.steps:
    if stop.is_set():
        if args.mode == "halfwrite":
            with open(ckpt / "state.json", "w") as f:  # not atomic: half a checkpoint
                f.write('{"step": ')
                f.flush()
                time.sleep(3600)
        save(step, total)
        print(f"saved step {step} on the notice", flush=True)
        sys.exit(0)
    step += 1
    total += step
    respot.report(step, total_steps=args.steps, total=float(total))
    if args.mode == "fail" and step >= args.fail_at:
        print("boom: the script failed", flush=True)
        sys.exit(3)
    if args.save_every and step % args.save_every == 0:
        save(step, total)
        respot.checkpoint_saved(step)
    time.sleep(args.sleep)
(out / "result.json").write_text(json.dumps({"step": step, "total": total}))
print("done", flush=True)
