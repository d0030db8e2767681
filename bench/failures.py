"""Time to a clear failure: a broken boot and a mistyped instance type, in the local runtime.

    .venv/bin/python -m bench.failures [--repeat 3] [--json]

Each scenario submits one job through `run()` and measures, from the submission to the
moment the job record is FAILED, the real seconds here. That span has two parts: EC2's
fulfilment and boot of each attempt, which the runtime plays scaled by `time_scale`
(`FleetTiming`: 15 s + 45 s simulated per attempt), and the control plane's own handling
(SNS/SQS, handlers, moto), which runs at real speed. The estimate of what a researcher
waits on AWS is therefore: attempts x (fulfil + boot) simulated + the control-plane part as
measured (real seconds minus the scaled EC2 part; on this loaded 2-core machine it is far
slower than Lambda's).

- broken boot, reported: every instance's boot script fails at boot and sends `boot_failed`
  before powering off (as `agent-bootstrap.sh` does); the job fails after
  `max_boot_failures` (3) attempts in a row.
- broken boot, silent: the instance powers off without a report; counted when EC2 says
  the instance is gone.
- mistyped instance type (`g5.xlarg`) on a deployment that lists no allowed types: EC2
  refuses the launch (`InvalidParameterValue`); the job fails at once with AWS's text.
- mistyped instance type on a deployment with `allowed_instance_types`: refused on the
  laptop by `run()` (SpecError), before anything is uploaded (time measured to the error).

Not included: real EC2 fulfilment and boot times vary (the simulated figures use
`FleetTiming`'s defaults, 15 s and 45 s); the reconcile period does not matter here (no
scenario waits for a tick).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench import _report
from infra.local.fleet import FleetTiming
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.exceptions import SpecError
from respot.spec.training import TrainingEnvVar

TIME_SCALE = 1 / 30
COMMAND = ".venv/bin/python -m bench.failures"


def _spec(name: str, **fields: Any) -> TrainingEnvVar:
    return TrainingEnvVar(name=name, entry_point="pkg.mod:Session", **fields)


def _until_failed(rt: LocalRuntime, job_id: str, started: float, timeout: float) -> dict[str, Any]:
    while time.monotonic() - started < timeout:
        record = rt.job_record(job_id)
        if record is not None and record.state.is_terminal():
            real = time.monotonic() - started
            booted = sum(1 for a in record.attempts if a.instance_id is not None)
            timing = FleetTiming()
            ec2 = booted * (timing.fulfil_seconds + timing.boot_seconds)
            control = max(real - ec2 * TIME_SCALE, 0.0)
            return {
                "state": record.state.value,
                "real_seconds": round(real, 3),
                "attempts": len(record.attempts),
                "ec2_simulated_seconds": ec2,
                "control_plane_real_seconds": round(control, 3),
                "aws_estimate_seconds": round(ec2 + control, 1),
                "reason": record.reason,
            }
        time.sleep(0.05)
    return {"state": "TIMEOUT", "real_seconds": None, "aws_estimate_seconds": None}


def broken_boot(report: bool) -> dict[str, Any]:
    """One job on a fleet whose every boot fails."""
    options = RuntimeOptions(time_scale=TIME_SCALE, timing=FleetTiming(), slack=False)
    with LocalRuntime(options) as rt:
        assert rt.fleet is not None
        rt.fleet.broken_boot = ("agent package download from S3 failed: AccessDenied", report)
        started = time.monotonic()
        job = rt.run(_spec("broken-boot"))
        return _until_failed(rt, job.job_id, started, timeout=120)


def mistyped_type(allowed: bool) -> dict[str, Any]:
    """One job asking for `g5.xlarg`, with or without the deployment's allowed list."""
    options = RuntimeOptions(
        time_scale=TIME_SCALE, slack=False, allowed_instance_types=None if allowed else ()
    )
    with LocalRuntime(options) as rt:
        started = time.monotonic()
        try:
            job = rt.run(_spec("mistyped", instance_types=["g5.xlarg"]))
        except SpecError as exc:
            real = time.monotonic() - started
            return {
                "state": "refused by run()",
                "real_seconds": round(real, 3),
                "attempts": 0,
                "ec2_simulated_seconds": 0.0,
                "control_plane_real_seconds": 0.0,
                "aws_estimate_seconds": round(real, 3),
                "reason": exc.problems[0],
            }
        return _until_failed(rt, job.job_id, started, timeout=60)


SCENARIOS = {
    "broken boot, reported (boot_failed)": lambda: broken_boot(report=True),
    "broken boot, silent (instance gone)": lambda: broken_boot(report=False),
    "g5.xlarg, no allowed list (EC2 refuses)": lambda: mistyped_type(allowed=False),
    "g5.xlarg, allowed_instance_types set": lambda: mistyped_type(allowed=True),
}


def main() -> None:
    """Run every scenario `--repeat` times and write bench/results/failures.{json,md}."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results: dict[str, list[dict[str, Any]]] = {}
    for name, scenario in SCENARIOS.items():
        results[name] = [scenario() for _ in range(args.repeat)]
    rows = []
    for name, runs in results.items():
        real = _report.summary(r["real_seconds"] for r in runs)
        aws = _report.summary(r["aws_estimate_seconds"] for r in runs)
        states = sorted({r["state"] for r in runs})
        rows.append(
            [
                name,
                "/".join(states),
                runs[0]["attempts"],
                real["median"],
                real["max"],
                runs[0].get("ec2_simulated_seconds"),
                aws["median"],
                runs[0]["reason"],
            ]
        )
    markdown = _report.table(
        [
            "scenario",
            "end",
            "attempts",
            "real s (median)",
            "real s (max)",
            "EC2 s simulated",
            "AWS estimate s (median)",
            "reason shown",
        ],
        rows,
    )
    payload = {"time_scale": TIME_SCALE, "timing": FleetTiming().__dict__, "results": results}
    _report.write("failures", payload, markdown, command=COMMAND)
    print(json.dumps(payload, indent=1) if args.json else markdown)


if __name__ == "__main__":
    main()
