"""The laptop's copy of each workspace's Jupyter token: one 0600 file per job, in a 0700
directory under ~/.respot/ (or $RESPOT_NOTEBOOKS_DIR), the place the client keeps its state.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from respot.spec.jobid import check_job_id

ENV_DIR = "RESPOT_NOTEBOOKS_DIR"


def new_token() -> str:
    """48 hex characters (192 bits) from the OS's random source."""
    return secrets.token_hex(24)


def token_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or Path.home() / ".respot" / "notebooks")


def _path(job_id: str) -> Path:
    return token_dir() / f"{check_job_id(job_id)}.token"


def save_token(job_id: str, token: str) -> Path:
    """Write it 0600 (created so: never readable by others, not even for a moment)."""
    directory = token_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    path = _path(job_id)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    path.chmod(0o600)
    return path


def read_token(job_id: str) -> str | None:
    try:
        return _path(job_id).read_text().strip() or None
    except FileNotFoundError:
        return None


def forget_token(job_id: str) -> None:
    _path(job_id).unlink(missing_ok=True)
