"""Job environments through the real boot path: requirements with the S3 wheelhouse, a bad
requirement failing the job once, and a container image through a fake container engine.

The "package index" is a directory of one hand-built wheel (PIP_FIND_LINKS + PIP_NO_INDEX in
the machine's environment): no network. A resumed attempt must install from the wheelhouse
cached in S3: the index directory is emptied before the interruption.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.local.market import ChaosSchedule
from infra.local.runtime import LocalRuntime, RuntimeOptions
from infra.local.sandbox import AGENT_JOURNAL
from respot.storage import layout
from tests.e2e.helpers import counting_spec, expected_total, output, wait_no_live_instances
from tests.e2e.wheels import build_wheel

pytestmark = pytest.mark.e2e

SCALE = 1.0 / 30.0
PACKAGE = "respot-tinypkg"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("index")


@pytest.fixture(scope="module")
def rt(index: Path) -> Iterator[LocalRuntime]:
    build_wheel(index, PACKAGE, "1.0", "VALUE = 'from the job environment'\n")
    options = RuntimeOptions(
        time_scale=SCALE,
        chaos=ChaosSchedule(job_ids=set()),
        agent_env={"PIP_FIND_LINKS": str(index), "PIP_NO_INDEX": "1"},
    )
    with LocalRuntime(options) as runtime:
        yield runtime


def journal(rt: LocalRuntime, job_id: str) -> list[str]:
    assert rt.fleet is not None
    return [
        i.root.log(AGENT_JOURNAL) if i.root is not None else "" for i in rt.fleet.of_job(job_id)
    ]


def test_requirements_install_cold_then_resume_from_the_cached_wheelhouse(
    rt: LocalRuntime, index: Path
) -> None:
    assert rt.fleet is not None
    spec = counting_spec(
        "needs-pkg",
        entry_point="e2esessions.environments:NeedsPackageSession",
        requirements=[f"{PACKAGE}==1.0"],
        hyperparameters={"steps": 400},
    )
    handle = rt.run(spec)
    end = time.monotonic() + 90
    while handle.status().state != "RUNNING" and time.monotonic() < end:
        time.sleep(0.1)
    # The index goes away: the next attempt can only install from the S3 wheelhouse.
    saved = index.parent / "index-saved"
    shutil.copytree(index, saved, dirs_exist_ok=True)
    for wheel in index.glob("*.whl"):
        wheel.unlink()
    try:
        (first,) = [i for i in rt.fleet.live() if i.job_id == handle.job_id]
        assert rt.fleet.interrupt(first.instance_id)
        status = handle.wait(timeout=480, poll_seconds=0.3)
    finally:
        shutil.copytree(saved, index, dirs_exist_ok=True)
    record = status.record
    assert record is not None and status.state == "COMPLETED", record and record.timeline[-3:]
    assert len(record.attempts) == 2
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(400, 2)
    where = json.loads(output(rt, handle.job_id, "tinypkg.json"))
    assert where["value"] == "from the job environment"
    assert "/env/venv/" in where["package"]  # the job's venv, not the framework
    cold, cached = journal(rt, handle.job_id)
    assert "from the cold wheelhouse" in cold
    assert "from the cached wheelhouse" in cached
    # cached under its researcher's wheelhouse (the scope the job's credentials name)
    scope = layout.wheelhouse_scope(record.submission.submitted_by, handle.job_id)
    keys = rt.client("s3").list_objects_v2(
        Bucket=rt.sdk_deployment().bucket, Prefix=layout.wheelhouse_prefix(scope)
    )
    assert [k["Key"] for k in keys.get("Contents", []) if k["Key"].endswith("/wheels.zip")]
    wait_no_live_instances(rt, handle.job_id)


def test_unresolvable_requirements_fail_the_job_once_with_pips_message(rt: LocalRuntime) -> None:
    spec = counting_spec(
        "bad-reqs",
        entry_point="e2esessions.environments:NeedsPackageSession",
        requirements=[f"{PACKAGE}==9.9"],
    )
    handle = rt.run(spec)
    status = handle.wait(timeout=360, poll_seconds=0.3)
    record = status.record
    assert record is not None and status.state == "FAILED"
    assert len(record.attempts) == 1  # not retried on a new instance
    assert "job environment: pip could not resolve" in (record.reason or "")
    assert "9.9" in (record.reason or "")
    assert rt.wait_notifications()
    assert "pip could not resolve" in rt.slack_thread(handle.job_id)
    wait_no_live_instances(rt, handle.job_id)


def test_an_image_runs_the_session_runner_in_the_container(rt: LocalRuntime) -> None:
    assert rt.fleet is not None
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1.4"
    handle = rt.run(counting_spec("in-image", image=image, hyperparameters={"steps": 60}))
    status = handle.wait(timeout=360, poll_seconds=0.3)
    record = status.record
    assert record is not None and status.state == "COMPLETED", record and record.timeline[-3:]
    assert int(output(rt, handle.job_id, "weights.sha256")) == expected_total(60, 2)
    (inst,) = rt.fleet.of_job(handle.job_id)
    assert inst.root is not None
    calls = [
        json.loads(line)
        for line in (inst.root.path / "var/log/docker.jsonl").read_text().splitlines()
    ]
    # logged in to the image's registry with a token of the emulator's ECR, then pulled
    registry = image.split("/", maxsplit=1)[0]
    assert calls[0] == ["login", "--username", "AWS", "--password-stdin", registry]
    assert calls[1] == ["pull", image]
    run = calls[2]
    assert run[:2] == ["run", "--rm"]
    assert run[run.index("--gpus") : run.index("--gpus") + 2] == ["--gpus", "all"]
    assert run[run.index("--network") : run.index("--network") + 2] == ["--network", "host"]
    mounts = [run[i + 1] for i, a in enumerate(run) if a == "-v"]
    attempt_dir = str(inst.root.path / "var/lib/respot" / handle.job_id / "0001")
    assert f"{attempt_dir}:{attempt_dir}" in mounts  # code, data, checkpoint, output inside
    assert any(m.endswith(":ro") for m in mounts)  # respot's own site, read-only
    assert run[run.index(image) + 1] == "python"  # the image's Python runs the session runner
    assert "RESPOT_CHECKPOINT_DIR" in run and not any("=" in a for a in run if "RESPOT" in a)
