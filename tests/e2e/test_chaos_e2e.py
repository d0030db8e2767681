"""Chaos, end to end: everything AWS really does, at once, to several jobs.

- a spot market driven by real AWS availability traces (bench/traces/aws-2022-10-26),
  time-compressed: each 10-minute tick of a trace lasts one simulated minute (2 s here on
  an idle machine, longer on a busy one: `machine_stretch`),
  so pools come and go and running spot instances get their two-minute warnings;
- every EC2 event put on the bus twice, in a shuffled order;
- one agent killed in the middle of a checkpoint upload (blobs in S3, no manifest yet);
- one handler invocation that crashes after its write and before its effects (the
  replacement launch), as a Lambda that dies mid-transition would.
Every job must complete with the same result as an uninterrupted run, no instance may be
left running, and no job may ever have two instances training at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from moto.s3.models import S3Backend

import lambdas._runtime as lambda_runtime
from infra.local.market import Trace
from infra.local.runtime import LocalRuntime, RuntimeOptions
from respot.core.effects import LaunchInstance
from respot.core.job import AttemptEnd
from respot.storage import layout
from respot.wire.messages import new_job_id
from tests.conftest import TRACES as TRACE_SETS
from tests.e2e.helpers import (
    Invariants,
    assert_launches_match_attempts,
    counting_spec,
    expected_total,
    job_story,
    machine_stretch,
    output,
    wait_all,
    wait_no_live_instances,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRACES = TRACE_SETS / "aws-2022-10-26"
# (file, first tick): windows of the real traces where capacity comes and goes.
WINDOWS = [
    ("us-west-2a_v100_1.json", 264),
    ("us-west-2b_v100_1.json", 3),
    ("us-west-2a_k80_1.json", 236),
    ("us-west-2b_k80_8.json", 42),
]
STEPS = 400


def real_traces() -> list[Trace]:
    traces = []
    for name, start in WINDOWS:
        data = json.loads((TRACES / name).read_text())["data"]
        traces.append(Trace(f"{name}@{start}", 60, tuple(int(x) for x in data[start:])))
    return traces


class MidUploadKiller:
    """Kills a job's instance while a checkpoint's blobs are in S3 but its manifest is not.

    The emulator's S3 is the trigger, so no load can make it miss: when the manifest PUT of a
    checkpoint past step 40 arrives from the job's live, un-noticed attempt (the key names the
    attempt; every blob it lists is already stored, docs/agent.md), that instance is terminated
    (its processes killed) before the PUT is answered, and the PUT and any retry of it are
    refused, as a request from a machine that died mid-upload never lands. The first such
    checkpoint is taken. (It used to poll S3 for a new blob without a manifest, and on a
    machine with both cores busy it missed every window.)
    """

    def __init__(self, rt: LocalRuntime, job_id: str) -> None:
        self.rt, self.job_id = rt, job_id
        self.killed_step: int | None = None
        self.killed_instance: str | None = None
        self._refused: set[str] = set()
        self.passed: list[str] = []  # manifests let through, and why (a failure prints them)
        self._lock = threading.Lock()
        self._real_put = S3Backend.put_object
        killer, real_put = self, self._real_put

        def put_object(
            backend: S3Backend, bucket_name: str, key_name: str, *a: Any, **k: Any
        ) -> Any:
            if killer._cut(key_name):
                raise ConnectionAbortedError(f"{key_name}: its instance was killed mid-upload")
            return real_put(backend, bucket_name, key_name, *a, **k)

        S3Backend.put_object = put_object  # type: ignore[method-assign]

    def _cut(self, key: str) -> bool:
        if not key.startswith(layout.manifests_prefix(self.job_id)):
            return False
        parsed = layout.parse_manifest_key(key)
        with self._lock:
            if key in self._refused:
                return True
            if parsed is None or self.killed_step is not None or parsed[0] <= 40:
                return False
            step, attempt = parsed
            assert self.rt.fleet is not None
            mine = [i for i in self.rt.fleet.live() if i.job_id == self.job_id]
            live = [i for i in mine if i.attempt == attempt and i.noticed_at is None]
            if not live or not self.rt.fleet.terminate(live[0].instance_id, "killed mid-upload"):
                seen = [(i.instance_id, i.attempt, i.noticed_at is not None) for i in mine]
                self.passed.append(f"{key}: live (instance, attempt, noticed) = {seen}")
                return False
            self._refused.add(key)
            self.killed_step, self.killed_instance = step, live[0].instance_id
            return True

    def stop(self) -> None:
        S3Backend.put_object = self._real_put  # type: ignore[method-assign]


@pytest.fixture
def stretch() -> float:
    """Simulated time runs this much slower on a busy machine (helpers.machine_stretch)."""
    return machine_stretch()


@pytest.fixture
def rt(stretch: float) -> Iterator[LocalRuntime]:
    options = RuntimeOptions(
        time_scale=stretch / 30.0,
        traces=real_traces(),
        duplicate_events=True,
        reorder_events=True,
    )
    with LocalRuntime(options) as runtime:
        yield runtime


def test_every_job_survives_everything_at_once(rt: LocalRuntime, stretch: float) -> None:
    # GIVEN a handler that will die once between its write and its replacement launch
    control = lambda_runtime.control_plane()
    real_run = control._run
    crashed: list[int] = []

    def crash_once(job_id: str, effect: Any, depth: int, *rest: Any) -> None:
        if isinstance(effect, LaunchInstance) and effect.attempt >= 2 and not crashed:
            crashed.append(effect.attempt)
            raise RuntimeError("injected crash after the write, before the launch")
        real_run(job_id, effect, depth, *rest)

    control._run = crash_once  # type: ignore[method-assign]
    watch = Invariants(rt)
    # AND five jobs at once, one of them with big checkpoints whose upload will be cut
    specs = [
        counting_spec(
            f"chaos-{n}",
            seed=n,
            max_spot_wait="6s",
            hyperparameters={
                "steps": STEPS,
                "checkpoint_every": 25,
                "ballast_mb": 24 if n == 0 else 0,
            },
        )
        for n in range(5)
    ]
    ids = [new_job_id(s.name) for s in specs]
    killer = MidUploadKiller(rt, ids[0])
    try:
        handles = [rt.run(spec, job_id=job_id) for spec, job_id in zip(specs, ids, strict=True)]
        results = wait_all(rt, handles, timeout=300 * stretch)
    finally:
        killer.stop()
        watch.stop()
    # THEN every job completed with the result of an uninterrupted run
    for n, (handle, status) in enumerate(zip(handles, results, strict=True)):
        record = status.record
        assert record is not None and status.state == "COMPLETED", job_story(rt, handle.job_id)
        assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(STEPS, n)
        assert_launches_match_attempts(rt, record)
    # AND no instance is left running, and no job ever had two instances training
    for handle in handles:
        wait_no_live_instances(rt, handle.job_id)
    assert watch.violations == []
    # AND the chaos really happened: interruptions, the mid-upload kill, the crash
    assert sum(s.record.interruptions for s in results if s.record) >= 2
    assert killer.killed_step is not None, (
        "the checkpoint upload was never caught mid-way; manifests let through:\n"
        + "\n".join(killer.passed)
        + "\n"
        + job_story(rt, ids[0])
    )
    killed = results[0].record
    assert killed is not None
    lost = next(a for a in killed.attempts if a.instance_id == killer.killed_instance)
    assert lost.end is AttemptEnd.LOST
    # the half-uploaded checkpoint was never restored: the one before it was, by the first
    # attempt after the lost one whose agent got as far as its restore (under chaos the next
    # attempt may itself be noticed or lost before its agent reports; it restores nothing)
    after = next(a for a in killed.attempts if a.number > lost.number and a.started_at)
    assert after.restored_step is not None and after.restored_step < killer.killed_step, [
        (a.number, a.end, a.started_at, a.restored_step) for a in killed.attempts
    ]
    assert crashed, "no replacement launch happened, so the crash was never injected"
