"""A command job's script for the agent tests (stdlib only): counts steps, checkpoints into
$RESPOT_CHECKPOINT_DIR as a researcher's script would, and misbehaves on request.

--mode normal:    on SIGTERM, save at the step boundary and exit 0
--mode ignore:    ignore SIGTERM and keep training (killed at the last safe moment)
--mode fail:      exit 3 after --fail-at steps, with a message
--mode halfwrite: on SIGTERM, start writing a checkpoint, write half of it, and hang
--mode poll:      ignore SIGTERM, count SIGUSR1, and stop when the notice file appears
                  (keeping what it read and how many SIGUSR1 came in its checkpoint); keep
                  training when the rebalance file appears (reporting rebalance=1, keeping it)
Under torchrun (RANK set) every rank reports; rank 0 alone saves and says so.
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
parser.add_argument("--say-saved", action="store_true", help="checkpoint_saved on the notice")
args = parser.parse_args()

ckpt = Path(os.environ["RESPOT_CHECKPOINT_DIR"])
out = Path(os.environ["RESPOT_OUTPUT_DIR"])
stop = threading.Event()
rank = int(os.environ.get("RANK", "0"))
usr1 = []
notice_file = Path(os.environ["RESPOT_NOTICE_FILE"])
rebalance_file = Path(os.environ["RESPOT_REBALANCE_FILE"])
seen_notice = None
seen_rebalance = None


def on_term(signum, frame):
    stop.set()


if args.mode in ("ignore", "poll"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_term)
if args.mode == "poll":
    signal.signal(signal.SIGUSR1, lambda signum, frame: usr1.append(signum))


def save(step, total):
    if rank != 0:
        return
    partial = ckpt / "state.json.partial"
    state = {"step": step, "total": total}
    if args.mode == "poll":
        state |= {"notice": seen_notice, "usr1": len(usr1), "rebalance": seen_rebalance}
    if args.mode == "silent":
        state |= {"attempt": os.environ["RESPOT_ATTEMPT"]}
    partial.write_text(json.dumps(state))
    os.replace(partial, ckpt / "state.json")


step, total = 0, 0
if (ckpt / "state.json").exists():
    state = json.loads((ckpt / "state.json").read_text())
    step, total = state["step"], state["total"]
print(f"start step={step} resumed={os.environ['RESPOT_RESUMED']}", flush=True)
if rank == 0:  # what a SummaryWriter would leave: synced with the job's TensorBoard
    tb = Path(os.environ["RESPOT_TENSORBOARD_DIR"]) / "run"
    tb.mkdir(parents=True, exist_ok=True)
    (tb / f"events.out.tfevents.{os.environ['RESPOT_ATTEMPT']}").write_bytes(b"scalars")
(out / "env.json").write_text(
    json.dumps({k: v for k, v in os.environ.items() if k.startswith("RESPOT_")})
)
while step < args.steps:
    if args.mode == "poll" and seen_rebalance is None and rebalance_file.exists():
        seen_rebalance = json.loads(rebalance_file.read_text()) | {"at_step": step}
    if args.mode == "poll" and notice_file.exists():
        seen_notice = json.loads(notice_file.read_text())
        # The agent writes the file, then signals the group: wait for the signal (bounded;
        # the test's assertion on the count says whether it came), not a guessed interval.
        for _ in range(1500):
            if usr1:
                break
            time.sleep(0.01)
        stop.set()
    if stop.is_set():
        if args.mode == "halfwrite":
            with open(ckpt / "state.json", "w") as f:  # not atomic: half a checkpoint
                f.write('{"step": ')
                f.flush()
                time.sleep(3600)
        save(step, total)
        if rank == 0 and (args.mode == "poll" or args.say_saved):
            respot.checkpoint_saved(step)
        if args.mode == "poll":
            sys.exit(7)  # any exit after the notice is an interruption
        print(f"saved step {step} on the notice", flush=True)
        sys.exit(0)
    step += 1
    total += step
    seen = {"rebalance": 1.0} if seen_rebalance else {}
    if args.mode != "silent":  # "silent": a script that never reports a step
        respot.report(step, total_steps=args.steps, total=float(total), **seen)
    if args.mode == "fail" and step >= args.fail_at:
        print("boom: the script failed", flush=True)
        sys.exit(3)
    if args.save_every and step % args.save_every == 0 and rank == 0:
        save(step, total)
        respot.checkpoint_saved(step)
    time.sleep(args.sleep)
if rank == 0:
    (out / "result.json").write_text(json.dumps({"step": step, "total": total}))
(out / f"rank{rank}.txt").write_text(os.environ.get("WORLD_SIZE", "-"))
print("done", flush=True)
