"""What an attempt's steps share: its state, how it ended, and what it uses of its agent.

The steps themselves: `prepare` (1-4), `trainloop` (5-6), `endings` (7); `attempt` runs
them in order, and `runner.Agent` runs the attempt (see respot.agent.runner).
"""

from __future__ import annotations

import collections
import logging
import queue
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from respot.agent import environment as job_env
from respot.agent.config import AgentConfig
from respot.agent.imds import InstanceIdentity
from respot.agent.logship import LogShipper
from respot.agent.messenger import AgentMessenger
from respot.agent.notices import InterruptionNotice, StopRequest
from respot.agent.process import AttemptDirs
from respot.agent.progress import Progress
from respot.agent.regional import RegionalClients
from respot.agent.scalars import ScalarLog
from respot.agent.warmstart import WarmSession
from respot.storage.checkpoints import CheckpointStore

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LOG_TAIL_LINES = 50

Outcome = Literal["completed", "preempted", "failed"]


@dataclass(frozen=True)
class AgentResult:
    """How the attempt ended."""

    outcome: Outcome
    job_id: str
    attempt: int
    step: int | None = None
    checkpoint_step: int | None = None
    exit_code: int | None = None
    reason: str | None = None


class _LogTail(logging.Handler):
    """Keeps the agent's own last log lines (for AgentFailed when setup fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}"[:1000])


class RunningAgent(Protocol):
    """What an attempt uses of the agent that runs it (respot.agent.runner.Agent)."""

    config: AgentConfig
    regional: RegionalClients
    logs: Any
    _events: queue.Queue[Any]
    _notice: InterruptionNotice | None
    _signalled: bool
    _log_tail: _LogTail

    @property
    def s3(self) -> S3Client: ...

    @property
    def instance_s3(self) -> S3Client: ...

    def secrets_in(self, region: str | None) -> Any: ...

    def _stop_requested(self, job_id: str, attempt: int) -> StopRequest | None: ...

    def _check_signal(self) -> None: ...

    def _notice_pending(self) -> bool: ...


class AttemptState:
    """The state of one attempt while it runs."""

    def __init__(
        self,
        agent: RunningAgent,
        identity: InstanceIdentity,
        *,
        job_id: str,
        attempt: int,
        messenger: AgentMessenger,
        dirs: AttemptDirs,
        started: float,
    ) -> None:
        self.agent = agent
        self.config = agent.config
        self.s3 = agent.s3
        self.identity = identity
        self.job_id = job_id
        self.attempt = attempt
        self.messenger = messenger
        self.dirs = dirs
        self.started = started
        self.progress = Progress()
        self.store = CheckpointStore(bucket=self.config.bucket, job_id=job_id, client=self.s3)
        self.restored_step: int | None = None
        self.scalars = ScalarLog(dirs.root / "tensorboard", attempt=attempt)
        self.shipper: LogShipper | None = None
        self.warm: WarmSession | None = None  # the warm session process, until it resumes
        self.warm_failure: str | None = None
        self.warm_capable: bool | None = None  # the replacement starts warm (known on a notice)
        self.slowest_upload: float | None = None  # of this attempt (the notice hold's estimate)
        self.job_python = job_env.JobPython(str(self.config.framework_python or sys.executable))
        self.phases: dict[str, float] = {}  # seconds of each step of the start (bench.boot)


def _max(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
