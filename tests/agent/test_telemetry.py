"""GPU telemetry: NVML sampled by the agent (a fake NVML at the library boundary), carried on
heartbeats, kept on the record, shown by `respot status`, the Slack card, TensorBoard and the
timeline picture; and with no GPU (the real `pynvml` here), one "no GPU" and nothing else."""

from __future__ import annotations

import io
import logging
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from respot.agent.scalars import ScalarLog
from respot.agent.telemetry import GpuTelemetry
from respot.client.plot import draw_timeline, picture_data
from respot.core.events import AgentReport
from respot.notify.cards import status_card
from respot.wire.gpu import MAX_GPUS, GpuSample, summary, tensorboard_scalars
from respot.wire.messages import AgentMessage, AgentProgress, encode
from tests.core.factories import agent
from tests.core.test_lifecycle import started_job

GIB = 1024**3


class NVMLError(Exception):
    pass


class FakeNvml:
    """The part of pynvml's API the agent uses; GPU 1 does not report power (like some boards)."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, utils: list[list[int]], *, fail_init: str | None = None) -> None:
        self._utils = utils  # per GPU, the utilization returned by successive reads
        self._reads = [0] * len(utils)
        self.fail_init = fail_init
        self.shutdowns = 0
        self.lock = threading.Lock()

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError(self.fail_init)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self._utils)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return b"NVIDIA A10G"

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        with self.lock:
            series = self._utils[handle]
            value = series[min(self._reads[handle], len(series) - 1)]
            self._reads[handle] += 1
        return SimpleNamespace(gpu=value, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=(10 + handle) * GIB, total=24 * GIB, free=0)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 60 + handle

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 1:
            raise NVMLError("Not Supported")
        return 150_000  # milliwatts


def test_two_gpus_are_sampled_and_a_heartbeat_carries_their_means() -> None:
    # GIVEN two GPUs whose utilization reads 40 then 80 (GPU 0) and 100 (GPU 1)
    nvml = FakeNvml([[40, 80], [100]])
    seen: list[list[GpuSample]] = []
    telemetry = GpuTelemetry(every_seconds=3600, on_sample=seen.append, nvml=nvml)
    # WHEN sampled twice (as the thread would, once per interval) and a heartbeat takes them
    telemetry.sample_once(nvml)
    telemetry.sample_once(nvml)
    taken = telemetry.take()
    # THEN per GPU: mean utilization, peak memory, temperature, power (None where unsupported)
    assert taken is not None and [g.index for g in taken] == [0, 1]
    g0, g1 = taken
    assert (g0.utilization_pct, g1.utilization_pct) == (60.0, 100.0)
    assert (g0.memory_used_mib, g0.memory_total_mib) == (10 * 1024, 24 * 1024)
    assert (g0.temperature_c, g1.temperature_c) == (60.0, 61.0)
    assert (g0.power_w, g1.power_w) == (150.0, None)
    assert g0.name == "NVIDIA A10G"
    # AND every raw sample went to on_sample (the TensorBoard writer)
    assert [[g.utilization_pct for g in s] for s in seen] == [[40.0, 100.0], [80.0, 100.0]]
    # AND with no new sample, the next heartbeat repeats the latest rather than saying nothing
    again = telemetry.take()
    assert again is not None and again[0].utilization_pct == 80.0


def test_the_thread_samples_on_its_interval_and_releases_nvml() -> None:
    nvml = FakeNvml([[50]])
    telemetry = GpuTelemetry(every_seconds=0.02, nvml=nvml).start()
    deadline = time.monotonic() + 10
    while telemetry.samples < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    telemetry.stop()
    assert telemetry.samples >= 3 and telemetry.available is True
    assert nvml.shutdowns == 1


def test_no_gpu_is_said_once_and_training_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN NVML that cannot start (no driver on this machine)
    nvml = FakeNvml([], fail_init="NVML Shared Library Not Found")
    caplog.set_level(logging.INFO, logger="respot.agent.telemetry")
    telemetry = GpuTelemetry(every_seconds=0.01, nvml=nvml).start()
    time.sleep(0.1)
    telemetry.stop()
    # THEN one line says so, heartbeats carry nothing, nothing else was tried
    lines = [r.getMessage() for r in caplog.records if "no GPU" in r.getMessage()]
    assert lines == ["no GPU (NVML: NVML Shared Library Not Found): GPU telemetry off; "
                     "training goes on"]  # fmt: skip
    assert telemetry.available is False and telemetry.take() is None and telemetry.samples == 0


def test_the_real_nvml_library_here_finds_no_gpu(caplog: pytest.LogCaptureFixture) -> None:
    # The real code path: `import pynvml` (nvidia-ml-py) and nvmlInit on a machine without one.
    pytest.importorskip("pynvml")
    caplog.set_level(logging.INFO, logger="respot.agent.telemetry")
    telemetry = GpuTelemetry(every_seconds=0.01).start()
    telemetry.stop()
    assert telemetry.available is False and telemetry.take() is None
    assert sum("no GPU" in r.getMessage() for r in caplog.records) == 1


def full_sample(index: int) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA H100 80GB HBM3 with a long marketing name padded to the limit"[:64],
        utilization_pct=99.5,
        memory_used_mib=81_000.5,
        memory_total_mib=81_559.0,
        temperature_c=83.0,
        power_w=699.9,
    )


def test_telemetry_keeps_a_heartbeat_small() -> None:
    # Sixteen GPUs with every figure and a long name, plus 50 metrics: still a few KiB.
    body = AgentProgress(
        step=10**9,
        total_steps=10**9,
        metrics={f"metric_{i:02d}_with_a_long_name": 1.0 / 3 for i in range(50)},
        gpus=[full_sample(i) for i in range(MAX_GPUS)],
    )
    message = AgentMessage(
        job_id="j" * 80,
        attempt=999,
        instance_id="i-0123456789abcdef0",
        seq=10**6,
        sent_at=datetime.now(UTC),
        body=body,
    )
    size = len(encode(message).encode())
    assert size < 8 * 1024, size
    gpu_part = len(encode(AgentProgress(gpus=[full_sample(0)])).encode())
    assert gpu_part < 300
    with pytest.raises(ValueError, match="at most 16"):
        AgentProgress(gpus=[full_sample(i) for i in range(MAX_GPUS + 1)])


def test_the_record_status_card_and_picture_show_the_gpus(tmp_path: Path) -> None:
    # GIVEN a running job whose heartbeats carry two GPUs' telemetry
    d = started_job()
    assert d.job is not None
    gpus = [full_sample(0), full_sample(1).model_copy(update={"utilization_pct": 50.0})]
    for i, step in enumerate((100, 200, 300)):
        body = AgentProgress(step=step, total_steps=1000, gpus=gpus)
        d.apply(AgentReport(agent(d.job, 1, "i-1", body, seq=2 + i, sent=5 + 60 * i)), 5 + 60 * i)
    job = d.job
    # THEN the record keeps the newest, and the progress history the mean utilization
    assert job.progress.gpus == gpus
    history = [e.data.get("gpu_util_pct") for e in job.timeline if e.kind == "progress"]
    assert history and set(history) == {74.8}
    # AND `respot status` prints a line per GPU
    from respot.cli.jobs import render_status

    buffer = io.StringIO()
    render_status(job, Console(file=buffer, width=200), datetime.now(UTC))
    text = buffer.getvalue()
    assert "gpu         2 x NVIDIA H100" in text and "75% util" in text
    assert "gpu1  NVIDIA H100" in text and "50% util" in text and "700 W" in text
    # AND the Slack card has a GPU field while the job runs
    card = status_card(job, datetime.now(UTC))
    blocks = card.payload()["blocks"]
    fields = [f["text"] for b in blocks if b.get("fields") for f in b["fields"]]
    assert any(t.startswith("*GPU*") and "75% util" in t for t in fields), fields
    # AND the timeline picture draws the utilization
    pic = picture_data(job)
    assert [u for _, u in pic.gpu_util] == history
    assert draw_timeline(job, tmp_path / "t.png").stat().st_size > 10_000


def test_samples_become_tensorboard_scalars_under_system(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    log = ScalarLog(tmp_path / "tb", attempt=1).start()
    log.wait_open(30)
    log.add(7, tensorboard_scalars([full_sample(0)]), time.time())
    log.sync(_NoS3(), "b", "j", final=True)
    (path,) = (tmp_path / "tb").glob("events.out.tfevents.*")
    tags = {
        (v.tag, event.step)
        for event in EventFileLoader(str(path)).Load()
        for v in event.summary.value
    }
    assert {t for t, _ in tags} == {
        "system/gpu0/utilization_pct",
        "system/gpu0/memory_used_mib",
        "system/gpu0/temperature_c",
        "system/gpu0/power_w",
    }
    assert {s for _, s in tags} == {7}


class _NoS3:
    def upload_file(self, *args: Any) -> None:
        return None


def test_summary_reads_well() -> None:
    assert summary([]) == "no GPU"
    assert summary([GpuSample(index=0)]) == "1 GPU(s)"
    text = summary([full_sample(0)])
    assert text.startswith("1 x NVIDIA H100") and "100% util" in text and "83°C max" in text
