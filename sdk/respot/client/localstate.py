"""How other shells find `respot local up`: a small state file with the emulator's endpoint.

`respot local up` starts a `LocalRuntime` in its own (foreground) process and writes
`~/.respot/local.json` (or `$RESPOT_LOCAL_STATE`): its pid, the moto endpoint and the
deployment description the SDK needs. Commands run with `--local` (or `RESPOT_LOCAL=1`) read
it and talk to the runtime over HTTP exactly as the SDK talks to AWS. The file is removed
when the runtime stops; a file left by a runtime that died is recognized as stale.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from respot.client.deployment import Deployment
from respot.exceptions import DeploymentNotFoundError

ENV_LOCAL = "RESPOT_LOCAL"
ENV_LOCAL_STATE = "RESPOT_LOCAL_STATE"
DEFAULT_STATE_PATH = Path("~/.respot/local.json")
# The emulator accepts any credentials; these are the ones the local runtime uses itself.
LOCAL_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@dataclass(frozen=True)
class LocalState:
    """What `respot local up` tells other shells about itself."""

    pid: int
    endpoint_url: str
    deployment: dict[str, Any]
    started_at: str
    time_scale: float
    work_root: str
    demo_data: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def sdk_deployment(self) -> Deployment:
        """The deployment as the SDK sees it."""
        return Deployment.from_json(json.dumps(self.deployment))

    def session(self) -> Any:
        """A boto3 session with the emulator's credentials, in the deployment's region."""
        import boto3

        region = self.deployment.get("region") or "us-east-1"
        return boto3.session.Session(region_name=region, **LOCAL_CREDENTIALS)


def state_path() -> Path:
    """Where the state file lives: `$RESPOT_LOCAL_STATE`, else `~/.respot/local.json`."""
    raw = os.environ.get(ENV_LOCAL_STATE, "").strip()
    return Path(raw).expanduser() if raw else DEFAULT_STATE_PATH.expanduser()


def write_state(state: LocalState, path: Path | None = None) -> Path:
    """Write the state file atomically, readable only by its owner."""
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".local-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(asdict(state), out, indent=1)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_state(path: Path | None = None) -> LocalState | None:
    """The state file's content, or None if there is none (or it is unreadable)."""
    path = path or state_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return LocalState(**data)
    except (OSError, ValueError, TypeError):
        return None


def clear_state(pid: int, path: Path | None = None) -> bool:
    """Remove the state file if it is the one process `pid` wrote; True if removed."""
    path = path or state_path()
    state = read_state(path)
    if state is None or state.pid != pid:
        return False
    path.unlink(missing_ok=True)
    return True


def pid_alive(pid: int) -> bool:
    """True if a process with this id exists and has not exited (a zombie has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: an exited process its parent has not reaped yet still answers kill(0)
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def endpoint_answers(url: str, timeout: float = 2.0) -> bool:
    """True if something answers HTTP at `url` (the moto server answers its root)."""
    if not url.startswith(("http://127.0.0.1:", "http://localhost:")):
        return False  # the local runtime binds loopback only; anything else is not ours
    try:
        with urllib.request.urlopen(url, timeout=timeout):  # noqa: S310 - loopback http only
            return True
    except urllib.error.HTTPError:
        return True  # it answered, with an error status
    except (urllib.error.URLError, OSError):
        return False


def live_state(path: Path | None = None) -> LocalState | None:
    """The state of a running local runtime, or None."""
    state = read_state(path)
    if state is None or not pid_alive(state.pid) or not endpoint_answers(state.endpoint_url):
        return None
    return state


def connect_local(path: Path | None = None) -> tuple[Deployment, Any]:
    """(deployment, boto3 session) of the running local runtime; a clear error if none runs."""
    path = path or state_path()
    state = read_state(path)
    if state is None:
        raise DeploymentNotFoundError(
            f"no local runtime is running ({path} does not exist). Start one in another shell "
            "with `respot local up` (add --with-demo-data for the digits example), or drop "
            "--local / RESPOT_LOCAL to use the AWS deployment."
        )
    if not pid_alive(state.pid) or not endpoint_answers(state.endpoint_url):
        raise DeploymentNotFoundError(
            f"the local runtime recorded in {path} (pid {state.pid}, {state.endpoint_url}) is not "
            "running any more; start it again with `respot local up` (its jobs are gone with it)"
        )
    return state.sdk_deployment(), state.session()


def local_requested(flag: bool) -> bool:
    """True if the command was asked to use the local runtime (`--local` or RESPOT_LOCAL)."""
    if flag:
        return True
    return os.environ.get(ENV_LOCAL, "").strip().lower() in {"1", "true", "yes", "on"}
