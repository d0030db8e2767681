"""How an attempt starts its session process: the launcher and the launch file.

Plain (the job's Python), torchrun (`processes_per_node`) or the image's container (with
torchrun inside for several processes); the `SessionLaunch` the session process reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from respot.agent import launch as launchers
from respot.agent.notebook import session_entry
from respot.agent.process import AttemptDirs, respot_site
from respot.agent.protocol import SessionLaunch


def launcher_for(
    spec: Any,
    environment: dict[str, str],
    *,
    python: str,
    dirs: AttemptDirs,
    job_id: str,
    attempt: int,
    resumed: bool,
) -> launchers.Launcher:
    """Plain, torchrun (processes_per_node) or the image's container."""
    nproc = launchers.processes(spec.processes_per_node)
    if spec.image is None:
        return launchers.torchrun(python, nproc) if nproc > 1 else launchers.plain(python)
    (dirs.root / "ipc").mkdir(parents=True, exist_ok=True)
    # The job's variables and its secrets' names (`-e NAME`: the value comes from the engine's
    # environment, never its argv).
    names = ["PYTHONUNBUFFERED", *sorted({*environment, *(spec.secrets or {})})]
    names += [
        "RESPOT_JOB_ID",
        "RESPOT_ATTEMPT",
        "RESPOT_SEED",
        "RESPOT_CHECKPOINT_DIR",
        "RESPOT_DATA_DIR",
        "RESPOT_OUTPUT_DIR",
        "RESPOT_HYPERPARAMETERS",
    ]
    if resumed:
        names.append("RESPOT_RESUME_STEP")
    box = launchers.container(
        spec.image,
        name=f"respot-{job_id}-{attempt}",
        # The attempt's directory holds code, data, checkpoint, output, staging and the
        # named pipes; respot's own site is read-only.
        mounts=[(dirs.root, False), (Path(respot_site()), True)],
        env_names=names,
        workdir=str(dirs.code),
    )
    if nproc > 1:
        inner = launchers.torchrun("python", nproc)
        return launchers.Launcher(box.argv[:-1] + inner.argv, True, nproc)
    return box


def session_launch(
    spec: Any,
    *,
    dirs: AttemptDirs,
    job_id: str,
    attempt: int,
    restored_step: int | None,
    warm: bool,
    named_pipes: bool,
) -> SessionLaunch:
    """What the session process reads: its entry point, directories, seed and resume step."""
    entry_point = session_entry(spec)[0]  # a notebook: Papermill runs it
    return SessionLaunch(
        entry_point=entry_point,
        code_dir=str(dirs.code),
        checkpoint_dir=str(dirs.checkpoint),
        data_dir=str(dirs.data),
        output_dir=str(dirs.output),
        staging_dir=str(dirs.staging),
        hyperparameters=dict(spec.hyperparameters),
        seed=spec.seed,
        job_id=job_id,
        attempt=attempt,
        resume_step=None if warm else restored_step,
        warm=warm,
        notice_file=str(dirs.root / "ipc" / "notice") if named_pipes else None,
    )
