"""`respot notebook open` on AWS (respot.workspace.ssm): the StartSession request for
`AWS-StartPortForwardingSession`, the plugin's argv as the AWS CLI builds it (the session's
token never on a command line), the plugin checked before any session starts, and a tunnel
through a stand-in plugin that listens where the real one would, closed with its session."""

from __future__ import annotations

import json
import socket
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError

from respot.workspace import ssm

INSTANCE = "i-0123456789abcdef0"
RESPONSE = {"SessionId": "alice-0abc", "TokenValue": "SECRET-TOKEN", "StreamUrl": "wss://x/y"}


def test_the_request_forwards_the_laptops_port_to_jupyterlab_on_the_instance():
    assert ssm.port_forwarding_request(INSTANCE, 8888, 8890) == {
        "Target": INSTANCE,
        "DocumentName": "AWS-StartPortForwardingSession",
        "Parameters": {"portNumber": ["8888"], "localPortNumber": ["8890"]},
    }
    assert ssm.port_forwarding_request("i-0123abcd", 1, 65535)["Target"] == "i-0123abcd"


@pytest.mark.parametrize(
    ("instance", "remote", "local", "field"),
    [
        ("i-xyz", 8888, 8888, "instance_id"),
        ("mi-0123456789abcdef0", 8888, 8888, "instance_id"),  # a managed node: not respot's
        (f"{INSTANCE}\n", 8888, 8888, "instance_id"),
        ("", 8888, 8888, "instance_id"),
        (INSTANCE, 0, 8888, "remote_port"),
        (INSTANCE, 8888, 65536, "local_port"),
        (INSTANCE, True, 8888, "remote_port"),
        (INSTANCE, 8888, "8888", "local_port"),
    ],
)
def test_bad_input_is_refused_naming_the_field(instance, remote, local, field):
    with pytest.raises(ssm.SessionManagerError, match=field):
        ssm.port_forwarding_request(instance, remote, local)


def test_the_plugin_gets_the_session_by_an_environment_variable_not_its_command_line():
    request = ssm.port_forwarding_request(INSTANCE, 8888, 8890)
    argv, env = ssm.plugin_argv(
        "/usr/local/bin/session-manager-plugin",
        {**RESPONSE, "ResponseMetadata": {}},
        region="eu-west-1",
        request=request,
        endpoint_url="https://ssm.eu-west-1.amazonaws.com",
    )
    assert argv == [
        "/usr/local/bin/session-manager-plugin",
        "AWS_SSM_START_SESSION_RESPONSE",
        "eu-west-1",
        "StartSession",
        "",
        json.dumps(request),
        "https://ssm.eu-west-1.amazonaws.com",
    ]
    assert not any("SECRET-TOKEN" in a for a in argv)
    assert json.loads(env["AWS_SSM_START_SESSION_RESPONSE"]) == RESPONSE


@pytest.mark.parametrize(
    ("said", "parsed"),
    [("1.2.764.0\n", (1, 2, 764, 0)), ("1.2", (1, 2, 0, 0)), ("v1.2", None), ("", None)],
)
def test_plugin_versions(said, parsed):
    assert ssm.parse_version(said) == parsed


def _run(version: str) -> Any:
    return lambda argv, **kw: SimpleNamespace(stdout=version, returncode=0)


def test_the_plugin_check_names_the_fix():
    missing = ssm.plugin_problem(lambda name: None, _run("1.2.764.0"))
    assert missing is not None and "not installed" in missing and ssm.INSTALL_URL in missing
    old = ssm.plugin_problem(lambda name: "/bin/smp", _run("1.2.707.0"))
    assert old is not None and "1.2.707.0 is older than 1.2.764.0" in old
    assert ssm.INSTALL_URL in old
    assert ssm.plugin_problem(lambda name: "/bin/smp", _run("1.2.896.0\n")) is None


class FakeSsm:
    """The SSM client: records StartSession and TerminateSession."""

    def __init__(self) -> None:
        self.started: list[dict[str, Any]] = []
        self.terminated: list[str] = []
        self.meta = SimpleNamespace(region_name="eu-west-1", endpoint_url="https://ssm.test")

    def start_session(self, **request: Any) -> dict[str, Any]:
        self.started.append(request)
        return dict(RESPONSE)

    def terminate_session(self, SessionId: str) -> dict[str, Any]:  # noqa: N803 - boto3's
        self.terminated.append(SessionId)
        return {"SessionId": SessionId}


class FakeDeployment:
    def __init__(self) -> None:
        self.ssm = FakeSsm()

    def session(self) -> Any:
        return SimpleNamespace(profile_name="default")

    def client(self, service: str, session: Any = None) -> Any:
        assert service == "ssm"
        return self.ssm


def test_without_the_plugin_no_session_is_started():
    deployment = FakeDeployment()
    with pytest.raises(ssm.PluginMissingError, match="session-manager-plugin is not installed"):
        ssm.forward(deployment, INSTANCE, 8888, 8890, which=lambda name: None)
    assert deployment.ssm.started == []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stand_in_plugin(tmp_path: Path) -> Path:
    """A session-manager-plugin stand-in: `--version`; otherwise it records what it was given
    and listens on the request's localPortNumber (127.0.0.1) until it is stopped."""
    script = tmp_path / "session-manager-plugin"
    script.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(
            f"""
            import json, os, socket, sys
            if sys.argv[1:] == ["--version"]:
                print("1.2.896.0")
                sys.exit(0)
            response = json.loads(os.environ[sys.argv[1]])
            request = json.loads(sys.argv[5])
            with open({str(tmp_path / "given.json")!r}, "w") as f:
                json.dump({{"argv": sys.argv[1:], "response": response}}, f)
            port = int(request["Parameters"]["localPortNumber"][0])
            server = socket.create_server(("127.0.0.1", port))
            print("Waiting for connections...", flush=True)
            while True:
                server.accept()[0].close()
            """
        )
    )
    script.chmod(0o755)
    return script


def test_a_tunnel_opens_on_the_laptops_port_and_closes_with_its_session(tmp_path: Path):
    plugin = stand_in_plugin(tmp_path)
    deployment, port = FakeDeployment(), _free_port()
    which = lambda name: str(plugin) if name == ssm.PLUGIN else None  # noqa: E731
    with ssm.forward(deployment, INSTANCE, 8888, port, which=which) as tunnel:
        tunnel.wait_ready(timeout=60)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        given = json.loads((tmp_path / "given.json").read_text())
        assert given["response"] == RESPONSE  # by the environment variable
        assert given["argv"][1:4] == ["eu-west-1", "StartSession", ""]
        assert "SECRET-TOKEN" not in json.dumps(given["argv"])
        assert deployment.ssm.started == [ssm.port_forwarding_request(INSTANCE, 8888, port)]
    assert tunnel.process.poll() is not None  # the plugin is stopped
    assert deployment.ssm.terminated == ["alice-0abc"]  # and the session ended


def test_a_plugin_that_ends_at_once_says_so_and_the_session_is_ended(tmp_path: Path):
    script = tmp_path / "session-manager-plugin"
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "if sys.argv[1:] == ['--version']:\n    print('1.2.896.0'); sys.exit(0)\n"
        "print('An error occurred (TargetNotConnected)'); sys.exit(255)\n"
    )
    script.chmod(0o755)
    deployment = FakeDeployment()
    tunnel = ssm.forward(deployment, INSTANCE, 8888, _free_port(), which=lambda n: str(script))
    with pytest.raises(ssm.SessionManagerError, match="TargetNotConnected"):
        tunnel.wait_ready(timeout=60)
    assert deployment.ssm.terminated == ["alice-0abc"]


class MovingSsm(FakeSsm):
    """A session per StartSession; `refuse[instance]`: errors its next calls raise first."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: dict[str, list[str]] = {}

    def start_session(self, **request: Any) -> dict[str, Any]:
        pending = self.refuse.get(request["Target"], [])
        if pending:
            code = pending.pop(0)
            raise ClientError({"Error": {"Code": code, "Message": code}}, "StartSession")
        self.started.append(request)
        return {**RESPONSE, "SessionId": f"alice-{len(self.started)}"}


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _until(check: Any, what: str, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {seconds}s")


def test_follow_moves_the_tunnel_to_the_replacement_on_the_same_local_port(tmp_path: Path):
    plugin = stand_in_plugin(tmp_path)
    deployment, port = FakeDeployment(), _free_port()
    deployment.ssm = MovingSsm()
    where: list[str | None] = [INSTANCE]
    said: list[str] = []
    stop = threading.Event()
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(
                ssm.follow(
                    deployment,
                    lambda: where[0],
                    8888,
                    port,
                    stop,
                    say=said.append,
                    poll_seconds=0.05,
                    which=lambda name: str(plugin),
                )
            )
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        _until(lambda: len(deployment.ssm.started) == 1 and _accepts(port), "the first tunnel")
        # WHEN the workspace moves (interruption): no instance for a while, then the
        # replacement, whose SSM Agent has not registered yet at the first StartSession
        replacement = "i-0fedcba9876543210"
        deployment.ssm.refuse[replacement] = ["TargetNotConnected"]
        where[0] = None
        _until(lambda: deployment.ssm.terminated == ["alice-1"], "the old tunnel closed")
        where[0] = replacement
        _until(lambda: len(deployment.ssm.started) == 2 and _accepts(port), "the tunnel re-opened")
        # THEN the same local port reaches the replacement
        assert deployment.ssm.started[1]["Target"] == replacement
        assert any("not reachable yet" in s for s in said), said
        assert any("moved from i-0123456789abcdef0 to None" in s for s in said), said
    finally:
        stop.set()
        thread.join(timeout=60)
    assert outcome == ["closed (Ctrl-C)"]
    assert deployment.ssm.terminated == ["alice-1", "alice-2"]


def test_follow_stops_at_once_when_session_manager_refuses(tmp_path: Path):
    plugin = stand_in_plugin(tmp_path)
    deployment = FakeDeployment()
    deployment.ssm = MovingSsm()
    deployment.ssm.refuse[INSTANCE] = ["AccessDeniedException"] * 100
    with pytest.raises(ssm.SessionRefusedError, match="AccessDeniedException"):
        ssm.follow(
            deployment, lambda: INSTANCE, 8888, _free_port(), threading.Event(),
            say=lambda s: None, poll_seconds=0.01, which=lambda name: str(plugin),
        )  # fmt: skip
    assert deployment.ssm.refuse[INSTANCE] == ["AccessDeniedException"] * 99  # asked once


def test_the_resolver_names_the_current_instance_and_says_when_the_workspace_stopped():
    def record(state: str, instance: str | None) -> Any:
        current = SimpleNamespace(instance_id=instance) if instance or state == "RUNNING" else None
        return SimpleNamespace(
            state=SimpleNamespace(is_terminal=lambda: state == "COMPLETED", value=state),
            current=current,
        )

    rows: dict[str, Any] = {"j-1": record("RUNNING", INSTANCE)}
    resolve = ssm.instance_resolver(SimpleNamespace(get=rows.get), "j-1", "mine")
    assert resolve() == INSTANCE
    rows["j-1"] = record("RUNNING", None)  # moving: the replacement has no instance yet
    assert resolve() is None
    rows["j-1"] = record("COMPLETED", None)
    with pytest.raises(ssm.SessionManagerError, match="`respot notebook start mine`"):
        resolve()


def test_the_resolver_stays_on_a_noticed_instance_through_its_save_window():
    """On the notice the replacement is current at once (no instance yet, or one booting), but
    the noticed attempt's JupyterLab serves on for the page's autosave until that attempt
    ends: the tunnel stays on it until then, and follows the replacement after."""
    old = SimpleNamespace(instance_id=INSTANCE, end=None)
    new = SimpleNamespace(instance_id=None, end=None)
    row = SimpleNamespace(
        state=SimpleNamespace(is_terminal=lambda: False, value="RUNNING"),
        attempts=[old, new],
        current=new,
    )
    resolve = ssm.instance_resolver(SimpleNamespace(get={"j-1": row}.get), "j-1", "mine")
    assert resolve() == INSTANCE  # the replacement requested: the page still saves to the old
    new.instance_id = "i-0replacement"
    assert resolve() == INSTANCE  # the replacement booting: the old one still serves
    old.end = "interrupted"
    assert resolve() == "i-0replacement"  # the old attempt ended: the page follows
