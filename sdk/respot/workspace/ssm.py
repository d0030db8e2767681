"""The AWS path of `respot notebook open`: Session Manager port forwarding to the instance.

`forward(deployment, instance_id, remote_port, local_port)` asks SSM for a session with the
AWS-owned document `AWS-StartPortForwardingSession` (`portNumber`: JupyterLab's port on the
instance's 127.0.0.1; `localPortNumber`: the laptop's, on its 127.0.0.1), then runs AWS's
`session-manager-plugin` binary with the session, as `aws ssm start-session` does
(awscli/customizations/sessionmanager.py): argv `[plugin, <response>, <region>,
"StartSession", <profile>, <request JSON>, <endpoint URL>]`, the response (session id, stream
URL, token) handed over by the name of an environment variable, never on the command line,
and never through a shell. The instance needs no inbound port: its SSM Agent connects out
(infra/constructs/workspaces.py, docs/notebooks-platform.md).

`follow(deployment, instance_resolver(table, job_id, name), ...)` keeps that tunnel on the
same local port across interruptions: it asks where the workspace runs now every few seconds,
closes the session to an instance that is gone and opens one to the replacement (retrying while
the new instance's SSM Agent is not registered yet), so a reload of the page reaches it.

What IAM lets a researcher do here: start such a session only with that document, only on
their own workspace's instance (its `respot:owner` tag is their `aws:userid`), and end only
their own sessions; anything else is AWS's AccessDeniedException, reported as such.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from respot.exceptions import RespotError
from respot.workspace.catalog import serving_attempt

DOCUMENT = "AWS-StartPortForwardingSession"
PLUGIN = "session-manager-plugin"
INSTALL_URL = (
    "https://docs.aws.amazon.com/systems-manager/latest/userguide/"
    "session-manager-working-with-install-plugin.html"
)
# AWS's minimum supported plugin (it signs OpenDataChannel, which the researcher policy grants);
# older plugins "might not succeed" (the plugin's release history in the Session Manager guide).
MIN_PLUGIN_VERSION = (1, 2, 764, 0)
RESPONSE_ENV = "AWS_SSM_START_SESSION_RESPONSE"  # the plugin reads the response from it
READY_SECONDS = 60.0  # bound: the plugin opens its WebSocket and listens on the local port
FOLLOW_POLL_SECONDS = 5.0  # how often `follow` asks where the workspace runs now
# A new instance's SSM Agent registers a while after boot (TargetNotConnected until then):
# `follow` tries one instance this many times, FOLLOW_POLL_SECONDS apart, before giving up.
FOLLOW_TRIES = 60
NOT_CONNECTED = "TargetNotConnected"  # StartSession's answer for an instance not registered
STOP_SECONDS = 5.0
_INSTANCE_ID = re.compile(r"i-[0-9a-f]{8}(?:[0-9a-f]{9})?")
_VERSION = re.compile(r"\d+(?:\.\d+){0,3}")


class SessionManagerError(RespotError):
    """The tunnel cannot be opened (the message says why and what fixes it)."""


class PluginMissingError(SessionManagerError):
    """The laptop has no (or too old a) session-manager-plugin."""


class SessionRefusedError(SessionManagerError):
    """Session Manager refused StartSession (AccessDenied, an unknown instance)."""


def port_forwarding_request(instance_id: str, remote_port: int, local_port: int) -> dict[str, Any]:
    """The `ssm.start_session` request that forwards the laptop's 127.0.0.1:`local_port` to
    the instance's 127.0.0.1:`remote_port`; bad input is refused naming the field."""
    if not isinstance(instance_id, str) or not _INSTANCE_ID.fullmatch(instance_id):
        raise SessionManagerError(
            f"instance_id {instance_id!r} is not an EC2 instance id (i- and 8 or 17 hex digits)"
        )
    for label, port in (("remote_port", remote_port), ("local_port", local_port)):
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise SessionManagerError(f"{label} {port!r}: give a TCP port from 1 to 65535")
    return {
        "Target": instance_id,
        "DocumentName": DOCUMENT,
        "Parameters": {"portNumber": [str(remote_port)], "localPortNumber": [str(local_port)]},
    }


def parse_version(text: str) -> tuple[int, ...] | None:
    """`session-manager-plugin --version`'s answer as numbers (None: not a version)."""
    cleaned = re.sub(r"\s+", "", text)
    if not _VERSION.fullmatch(cleaned):
        return None
    parts = [int(p) for p in cleaned.split(".")]
    return tuple(parts + [0] * (4 - len(parts)))


def plugin_argv(
    plugin: str,
    response: Mapping[str, Any],
    *,
    region: str,
    request: Mapping[str, Any],
    profile: str = "",
    endpoint_url: str,
) -> tuple[list[str], dict[str, str]]:
    """(argv, the environment variables to add) that hand `response` to the plugin."""
    session = {k: response[k] for k in ("SessionId", "TokenValue", "StreamUrl")}
    argv = [
        plugin,
        RESPONSE_ENV,  # the name of the variable holding the response (plugin >= 1.2.497.0)
        region,
        "StartSession",
        profile,
        json.dumps(dict(request)),
        endpoint_url,
    ]
    return argv, {RESPONSE_ENV: json.dumps(session)}


def plugin_problem(which: Any = shutil.which, run: Any = subprocess.run) -> str | None:
    """None if this laptop's session-manager-plugin can open tunnels; else why not and the
    fix (what `respot doctor` reports and `forward` raises)."""
    path = which(PLUGIN)
    if path is None:
        return (
            f"{PLUGIN} is not installed (or not on PATH): `respot notebook open` on AWS needs "
            f"it for Session Manager port forwarding; install it: {INSTALL_URL}"
        )
    try:
        answer = run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{path} --version failed ({exc}); reinstall it: {INSTALL_URL}"
    version = parse_version(answer.stdout or "")
    if version is None:
        return f"{path} --version answered {answer.stdout.strip()!r}; reinstall it: {INSTALL_URL}"
    if version < MIN_PLUGIN_VERSION:
        have, need = ".".join(map(str, version)), ".".join(map(str, MIN_PLUGIN_VERSION))
        return (
            f"{PLUGIN} {have} is older than {need}, the oldest AWS supports (it signs the "
            f"data channel); update it: {INSTALL_URL}"
        )
    return None


@dataclass
class Forward:
    """An open tunnel: the plugin's process and the SSM session; `close()` ends both."""

    session_id: str
    local_port: int
    process: subprocess.Popen[bytes]
    client: Any = field(repr=False)
    log: IO[bytes] | None = field(default=None, repr=False)  # the plugin's output
    closed: bool = False

    def wait_ready(self, timeout: float = READY_SECONDS) -> None:
        """Return once the laptop's port accepts connections; raise if the plugin ends first
        (its output says why) or it is not listening within `timeout` seconds."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.process.poll() is not None:
                said = self.output()
                self.close()
                raise SessionManagerError(
                    f"{PLUGIN} ended (exit {self.process.returncode}) before the tunnel opened: "
                    f"{said.strip()[-500:]}"
                )
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.local_port), timeout=1.0),
            ):
                return
            time.sleep(0.2)
        self.close()
        raise SessionManagerError(
            f"the tunnel did not open 127.0.0.1:{self.local_port} within {timeout:.0f}s"
        )

    def output(self) -> str:
        """What the plugin printed so far (its last 2,000 characters)."""
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        """Stop the plugin and end the session (both idempotent)."""
        if self.closed:
            return
        self.closed = True
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_SECONDS)
        with contextlib.suppress(Exception):  # the session may have ended with the plugin
            self.client.terminate_session(SessionId=self.session_id)
        if self.log is not None:
            self.log.close()

    def __enter__(self) -> Forward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def forward(
    deployment: Any,
    instance_id: str,
    remote_port: int,
    local_port: int,
    *,
    session: Any = None,
    which: Any = shutil.which,
    run: Any = subprocess.run,
    popen: Any = subprocess.Popen,
) -> Forward:
    """Open Session Manager port forwarding from the laptop's 127.0.0.1:`local_port` to
    `instance_id`'s 127.0.0.1:`remote_port`; the plugin is checked before any session starts."""
    request = port_forwarding_request(instance_id, remote_port, local_port)
    problem = plugin_problem(which, run)
    if problem is not None:
        raise PluginMissingError(problem)
    plugin = which(PLUGIN)
    session = session or deployment.session()
    client = deployment.client("ssm", session)
    try:
        response = client.start_session(**request)
    except Exception as exc:  # botocore's ClientError: AccessDenied names the missing grant
        code = getattr(exc, "response", {}).get("Error", {}).get("Code")
        if code == NOT_CONNECTED:  # a new instance whose SSM Agent has not registered yet
            raise SessionManagerError(f"{instance_id}: {exc}") from exc
        raise SessionRefusedError(
            f"Session Manager refused a tunnel to {instance_id}: {exc}. Only a workspace's "
            "owner may open it, and the stack must have workspaces on "
            "(docs/notebooks-platform.md)"
        ) from exc
    argv, extra = plugin_argv(
        plugin,
        response,
        region=client.meta.region_name,
        request=request,
        profile=_profile(session),
        endpoint_url=client.meta.endpoint_url,
    )
    # a file, not a pipe: a long session never blocks on it; Forward.close() closes it
    log = tempfile.TemporaryFile()  # noqa: SIM115
    try:
        process = popen(
            argv,
            env={**os.environ, **extra},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    except OSError as exc:
        log.close()
        with contextlib.suppress(Exception):
            client.terminate_session(SessionId=response["SessionId"])
        raise PluginMissingError(f"{plugin} could not be started ({exc}); {INSTALL_URL}") from exc
    return Forward(response["SessionId"], local_port, process, client, log=log)


def _profile(session: Any) -> str:
    """The profile the plugin signs with: the session's named one, else '' (the plugin then
    reads the same environment and default chain as boto3), as the AWS CLI passes it."""
    name = getattr(session, "profile_name", None)
    return str(name) if name and name != "default" else ""


def instance_resolver(table: Any, job_id: str, name: str) -> Callable[[], str | None]:
    """For `follow`: the instance `job_id` (workspace `name`) runs on now, read from the job
    table (`respot.aws.jobs.JobTable`) each time; None while it has none (moving); raises
    SessionManagerError once the job has ended (the workspace stopped)."""

    def current() -> str | None:
        record = table.get(job_id)
        if record is None:
            raise SessionManagerError(f"job {job_id} of workspace {name!r} is not in the table")
        if record.state.is_terminal():
            raise SessionManagerError(
                f"workspace {name!r} stopped (job {job_id} is {record.state.value}): "
                f"`respot notebook start {name}` starts it again where it was"
            )
        attempt = serving_attempt(record)  # through a noticed instance's save window
        return attempt.instance_id if attempt is not None else None

    return current


def follow(
    deployment: Any,
    current_instance: Callable[[], str | None],
    remote_port: int,
    local_port: int,
    stop: threading.Event,
    *,
    say: Callable[[str], None] = print,
    poll_seconds: float = FOLLOW_POLL_SECONDS,
    tries: int = FOLLOW_TRIES,
    ready_seconds: float = READY_SECONDS,
    **forward_options: Any,
) -> str:
    """Keep the laptop's 127.0.0.1:`local_port` forwarded to the instance the workspace runs
    on now, until `stop` is set: after an interruption `current_instance()` names the
    replacement (None while there is none), the old tunnel is closed and a new one opened on
    the same local port, so a reload of the page reaches the replacement. Returns why it
    stopped; raises what `current_instance` raises (the workspace stopped) and, after `tries`
    failed attempts at one instance, the last failure. Session Manager refusing the session
    (AccessDenied) is raised at once: trying again cannot fix it."""
    tunnel: Forward | None = None
    target: str | None = None
    failures = 0
    try:
        while not stop.is_set():
            instance = current_instance()
            if tunnel is not None and (instance != target or tunnel.process.poll() is not None):
                tunnel.close()
                tunnel = None
                say(
                    f"the workspace moved from {target} to {instance}: reload the page"
                    if instance != target
                    else f"the tunnel to {target} ended; opening it again"
                )
            if tunnel is None and instance is not None:
                if instance != target:
                    target, failures = instance, 0
                try:
                    tunnel = forward(
                        deployment, instance, remote_port, local_port, **forward_options
                    )
                    tunnel.wait_ready(ready_seconds)
                    say(f"tunnel open: 127.0.0.1:{local_port} -> {instance}:{remote_port}")
                except (PluginMissingError, SessionRefusedError):
                    raise  # trying again cannot fix these
                except SessionManagerError as exc:
                    tunnel = None
                    failures += 1
                    if failures >= tries:
                        raise SessionManagerError(
                            f"no tunnel to {instance} after {tries} tries: {exc}"
                        ) from exc
                    say(f"{instance} is not reachable yet ({exc}); trying again")
            stop.wait(poll_seconds)
        return "closed (Ctrl-C)"
    finally:
        if tunnel is not None:
            tunnel.close()
