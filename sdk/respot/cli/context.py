"""What every job command shares: which deployment to talk to, reading records, printing.

The deployment is the AWS one (`respot.client.deployment.discover`: environment variables, else the
SSM parameter the stack writes), or with `--local` / `RESPOT_LOCAL=1` the runtime that
`respot local up` runs in another shell (`respot.client.localstate`).

Errors respot raises on purpose (`RespotError`) and AWS errors are printed as one clear
message on stderr with exit code 1, never as a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from respot.client.deployment import Deployment
    from respot.client.handle import JobHandle
    from respot.core.job import JobRecord

LocalOption = Annotated[
    bool,
    typer.Option(
        "--local",
        help="Use the runtime `respot local up` runs on this machine (or set RESPOT_LOCAL=1).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]

F = TypeVar("F", bound=Callable[..., Any])
PLAIN_WIDTH = 200


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` on stderr and exit (the message is text, never markup)."""
    from rich.markup import escape

    err_console().print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def reports_errors(func: F) -> F:
    """Turn respot's and AWS's errors into a one-line message and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        from respot.exceptions import RespotError, SpecError

        try:
            return func(*args, **kwargs)
        except SpecError as exc:
            lines = "\n".join(f"  {p}" for p in exc.problems)
            fail(f"invalid job ({len(exc.problems)} problem(s)):\n{lines}")
        except RespotError as exc:
            fail(str(exc))
        except ClientError as exc:
            error = exc.response.get("Error", {})
            fail(f"AWS said {error.get('Code')}: {error.get('Message', '')}".rstrip(": "))
        except BotoCoreError as exc:
            fail(f"could not reach AWS: {exc}")

    return wrapper  # type: ignore[return-value]


_CONSOLES: dict[str, Console] = {}


def console() -> Console:
    """The stdout console (plain text when stdout is not a terminal)."""
    from rich.console import Console

    if "out" not in _CONSOLES:
        tty = sys.stdout.isatty()
        # Off a terminal (pipes, CI logs) tables keep whole ids rather than fit 80 columns.
        # emoji=False: user text such as 'a:b:c' or ':smile:' is printed as written.
        _CONSOLES["out"] = Console(highlight=False, emoji=False, width=None if tty else PLAIN_WIDTH)
    return _CONSOLES["out"]


def err_console() -> Console:
    """The stderr console."""
    from rich.console import Console

    if "err" not in _CONSOLES:
        _CONSOLES["err"] = Console(stderr=True, highlight=False, emoji=False)
    return _CONSOLES["err"]


def need_package(module: str, extra: str, what: str) -> None:
    """Exit with how to install `module` if it is missing."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        fail(f"{what} needs the {module} package: pip install 'respot[{extra}]'")


def print_json(data: Any) -> None:
    """JSON on stdout, one document, no colour."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


@dataclass
class Connection:
    """A deployment and a boto3 session to reach it."""

    deployment: Deployment
    session: Any
    local: bool

    def client(self, service: str) -> Any:
        """A boto3 client of the deployment (the emulator's, for the local runtime)."""
        return self.deployment.client(service, self.session)

    def handle(self, job_id: str) -> JobHandle:
        """A handle on a job of this deployment."""
        from respot.client.handle import JobHandle

        return JobHandle(job_id, self.deployment, self.session)

    def record(self, job_id: str) -> JobRecord:
        """The job's record; a clear error if the deployment does not know it."""
        from respot.exceptions import JobNotFoundError

        record = self.handle(job_id).record()
        if record is None:
            where = "the local runtime" if self.local else f"table {self.deployment.table_name}"
            raise JobNotFoundError(
                f"job {job_id!r} is not in {where}; `respot ls` lists the jobs it knows "
                "(a job submitted a moment ago may still be on its way)"
            )
        return record

    def recent(self, limit: int) -> list[JobRecord]:
        """Up to `limit` jobs, newest first."""
        from respot.aws.jobs import JobTable

        return JobTable(self.deployment.table_name, self.client("dynamodb")).recent(limit)


def connect(local: bool) -> Connection:
    """The deployment this command talks to."""
    from respot.client.localstate import connect_local, live_state, local_requested

    if local_requested(local):
        deployment, session = connect_local()
        return Connection(deployment, session, local=True)
    from respot.client.deployment import discover
    from respot.exceptions import DeploymentNotFoundError

    try:
        deployment = discover()
    except DeploymentNotFoundError as exc:
        if live_state() is not None:
            raise DeploymentNotFoundError(
                f"{exc}\nA local runtime is running on this machine: add --local "
                "(or export RESPOT_LOCAL=1) to use it."
            ) from exc
        raise
    return Connection(deployment, deployment.session(), local=False)


def is_terminal_output() -> bool:
    """True when stdout is a terminal (live displays and colour are allowed)."""
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"
