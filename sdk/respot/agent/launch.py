"""How the session process is started: on the job's Python, under torchrun, or in a container.

Each returns the argv that comes before `-c SESSION_BOOT ...` (respot.agent.process): lists,
never shell strings. The agent stays outside: only the session runner runs under torchrun or
in the container. docs/environments.md and docs/torchrun.md say what a session sees.
"""

from __future__ import annotations

import base64
import logging
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from respot.agent.regional import ECR_IMAGE, registry_region

logger = logging.getLogger(__name__)

CONTAINER_ENGINE = "docker"


class LaunchError(RuntimeError):
    """The session cannot be started as the spec asks (no GPU count, no container engine...)."""


@dataclass(frozen=True)
class Launcher:
    """The argv before SESSION_BOOT, and whether the session needs named pipes."""

    argv: list[str]
    named_pipes: bool = False
    processes: int = 1


def gpu_count() -> int:
    """The instance's GPUs, as `nvidia-smi` lists them (0 without nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    result = subprocess.run(  # noqa: S603 - a fixed argv
        [smi, "--query-gpu=index", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode != 0:
        logger.warning("nvidia-smi failed: %s", result.stderr.strip()[:200])
        return 0
    return len([line for line in result.stdout.splitlines() if line.strip()])


def processes(requested: int | str | None) -> int:
    """How many session processes: the spec's number, or one per GPU for 'auto'."""
    if requested is None:
        return 1
    if requested == "auto":
        count = gpu_count()
        if count == 0:
            logger.warning("processes_per_node is 'auto' but no GPU is visible: running one")
        return max(count, 1)
    return int(requested)


def plain(python: str) -> Launcher:
    """One process on the job's Python."""
    return Launcher([python])


def torchrun(python: str, nproc: int) -> Launcher:
    """`nproc` processes under torchrun on one node (RANK, LOCAL_RANK, WORLD_SIZE set)."""
    return Launcher(
        [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc-per-node={nproc}",
            "--no-python",
            python,
        ],
        named_pipes=True,
        processes=nproc,
    )


def container(
    image: str,
    *,
    name: str,
    mounts: list[tuple[Path, bool]],
    env_names: list[str],
    workdir: str,
    python: str = "python",
) -> Launcher:
    """`docker run` of the image with GPUs, host networking and the job's directories.

    Each mount is (host directory, read-only), at the same path inside. Variables pass by
    name (`-e NAME`): their values come from the client's environment, never the argv.
    """
    argv = [
        CONTAINER_ENGINE,
        "run",
        "--rm",
        "--name",
        name,
        "--gpus",
        "all",
        "--network",
        "host",
        "--ipc",
        "host",
    ]
    for path, read_only in mounts:
        argv += ["-v", f"{path}:{path}{':ro' if read_only else ''}"]
    for variable in env_names:
        argv += ["-e", variable]
    argv += ["-w", workdir, image, python]
    return Launcher(argv, named_pipes=True)


def pull(image: str, ecr: Any | None, env: Mapping[str, str]) -> None:
    """Log in to ECR when the image is there, then pull it; LaunchError with the reason."""
    if shutil.which(CONTAINER_ENGINE, path=env.get("PATH")) is None:
        raise LaunchError(
            f"the job names image {image!r} but this AMI has no {CONTAINER_ENGINE}; "
            "use an AMI with a container engine (the DLAMI has one)"
        )
    match = ECR_IMAGE.match(image)
    if match is not None and ecr is not None:
        data = ecr.get_authorization_token()["authorizationData"][0]
        # A token is for the registry of the region that issued it (its proxyEndpoint):
        # an ECR client of another region would log in to nothing (respot.agent.regional).
        issued_for = registry_region(
            str(data.get("proxyEndpoint", "")).removeprefix("https://") + "/"
        )
        if issued_for is not None and issued_for != match.group("region"):
            raise LaunchError(
                f"the ECR token came from {issued_for}, but {image} is in "
                f"{match.group('region')}: ask ECR in the registry's region"
            )
        token = data["authorizationToken"]
        user, _, password = base64.b64decode(token).decode().partition(":")
        login = subprocess.run(  # noqa: S603 - an argv list; the password goes on stdin
            [
                CONTAINER_ENGINE,
                "login",
                "--username",
                user,
                "--password-stdin",
                match.group("registry"),
            ],
            input=password,
            capture_output=True,
            text=True,
            env=dict(env),
            check=False,
        )
        if login.returncode != 0:
            raise LaunchError(f"logging in to {match.group('registry')}: {login.stderr[-500:]}")
    result = subprocess.run(  # noqa: S603 - an argv list
        [CONTAINER_ENGINE, "pull", image],
        capture_output=True,
        text=True,
        env=dict(env),
        check=False,
    )
    if result.returncode != 0:
        raise LaunchError(f"pulling {image}: {(result.stderr or result.stdout).strip()[-500:]}")
