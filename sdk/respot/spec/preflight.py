"""Checks of a job that need the laptop's clock and files, run before anything is uploaded.

`run()`, job files, `--rerun` and sweeps call `preflight` after the spec itself validated.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from respot.spec.static import command_problems, entry_point_problems
from respot.spec.training import TrainingEnvVar

# SNS accepts at most 256 KiB a message; the submission wraps the spec with what run() adds
# (provenance and its package versions, the code's location, the identity proof): keep room.
MAX_PUBLISHED_BYTES = 256 * 1024
ENVELOPE_ROOM_BYTES = 16 * 1024


def size_problems(spec: TrainingEnvVar) -> list[str]:
    """The spec's JSON too large to publish: the problem names the largest field."""
    size = len(spec.to_json().encode())
    room = MAX_PUBLISHED_BYTES - ENVELOPE_ROOM_BYTES
    if size <= room:
        return []
    dumped = spec.model_dump(mode="json", exclude_none=True)
    sizes = {name: len(json.dumps(value).encode()) for name, value in dumped.items()}
    largest = max(sizes, key=lambda name: sizes[name])
    return [
        f"{largest}: the job is {size:,} bytes as published ({largest} {sizes[largest]:,}); "
        f"SNS accepts {MAX_PUBLISHED_BYTES:,} and respot keeps {ENVELOPE_ROOM_BYTES:,} for what "
        "it adds: put large values in a file in S3 (data:) or in source_dir, and pass its path"
    ]


def preflight(spec: TrainingEnvVar, now: datetime) -> list[str]:
    """Checks that need the laptop's clock and files; one line per problem."""
    problems: list[str] = size_problems(spec)
    if spec.entry_point and spec.entry_point.endswith(".ipynb") and spec.source_dir is None:
        problems.append(
            f"source_dir: the notebook {spec.entry_point!r} is shipped from source_dir; set it to "
            "the directory the notebook is in"
        )
    if spec.deadline is not None:
        if spec.deadline <= now:
            problems.append(
                f"deadline: {spec.deadline.isoformat()} is in the past; set a later one"
            )
        elif spec.estimated_runtime is not None and now + spec.estimated_runtime > spec.deadline:
            problems.append(
                f"deadline: {spec.deadline.isoformat()} is sooner than the estimated runtime "
                f"({spec.estimated_runtime}) from now; move the deadline or lower the estimate"
            )
    if spec.source_dir is not None:
        path = Path(spec.source_dir)
        if not path.is_dir():
            problems.append(f"source_dir: {spec.source_dir!r} is not a directory on this machine")
        elif spec.entry_point is not None and spec.entry_point.endswith(".ipynb"):
            if not path.joinpath(*spec.entry_point.split("/")).is_file():
                problems.append(
                    f"entry_point: notebook {spec.entry_point!r} is not in source_dir "
                    f"{spec.source_dir!r}; check the spelling or the directory"
                )
        elif spec.entry_point is not None:
            module = spec.entry_point.split(":", 1)[0].split(".")
            candidates = [path.joinpath(*module).with_suffix(".py"), path.joinpath(*module)]
            if not any(c.exists() for c in candidates):
                problems.append(
                    f"entry_point: module {'.'.join(module)!r} is not in source_dir "
                    f"{spec.source_dir!r}; check the spelling or the directory"
                )
            else:
                problems += entry_point_problems(spec)  # read with ast, never imported
        problems += command_problems(spec)
    return problems
