"""How long a line the training prints takes to show in `respot logs --follow`.

A session prints `T <unix time>` every 50 ms for a while; `JobLogs.follow` (what `respot logs
--follow` runs) reads the job's CloudWatch stream through the local runtime's emulator and
notes when each line arrives. The latency of a line is arrival minus print time; it is made
of the agent's batching (one PutLogEvents per second) and the reader's polling (every
second locally, 2 s against AWS).

    python -m bench.log_latency [--lines 400] [--poll 1.0]

Prints one line of JSON: count, p50/p95/max latency in seconds, lines lost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import textwrap
import time
from pathlib import Path

from infra.local import cloud
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.client.logs import JobLogs, LogLine
from respot.spec.training import TrainingEnvVar

SESSION = textwrap.dedent(
    """
    import time
    from respot.training.session import TrainingSession

    class Ticker(TrainingSession):
        def train(self) -> None:
            n = int(self.hparams["lines"])
            self.total_steps = n
            for i in range(1, n + 1):
                print(f"T {time.time():.6f} {i}", flush=True)
                self.report(i)
                time.sleep(0.05)
    """
)


def measure(lines: int, poll_seconds: float) -> dict[str, float | int]:
    """Run the ticker job once and return the latency figures."""
    code = Path(tempfile.mkdtemp(prefix="respot-bench-logs-"))
    (code / "ticker.py").write_text(SESSION)
    spec = TrainingEnvVar(
        name="log-latency",
        entry_point="ticker:Ticker",
        source_dir=str(code),
        hyperparameters={"lines": lines},
    )
    latencies: list[float] = []

    def on_line(line: LogLine) -> None:
        parts = line.text.split()
        if len(parts) == 3 and parts[0] == "T":
            latencies.append(time.time() - float(parts[1]))

    with LocalRuntime(RuntimeOptions(time_scale=1 / 30)) as rt:
        handle = rt.run(spec)
        reader = JobLogs(rt.sdk_deployment(), cloud.session(), handle.job_id)
        while handle.record() is None:  # follow from the submission on
            time.sleep(0.1)
        record = reader.follow(handle, on_line, poll_seconds=poll_seconds, timeout=300)
    assert record is not None and record.state.value == "COMPLETED", record
    ordered = sorted(latencies)
    return {
        "lines": lines,
        "received": len(latencies),
        "lost": lines - len(latencies),
        "poll_seconds": poll_seconds,
        "p50_s": round(statistics.median(ordered), 3),
        "p95_s": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
        "max_s": round(ordered[-1], 3),
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=400)
    parser.add_argument("--poll", type=float, default=1.0)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.lines, args.poll)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
