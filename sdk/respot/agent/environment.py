"""The job's Python environment on the instance (docs/environments.md).

- No `requirements`: the session runs on the framework Python (the AMI contract, docs/ami.md).
- `requirements`: a virtualenv layered on the framework Python (`--system-site-packages`,
  plus a `.pth` to the framework's own site directories, since the framework's Python may
  itself be a venv). Only what the framework lacks is installed, always from a wheelhouse:
  cold, pip resolves against the index (`pip install --dry-run --report`), the missing wheels
  are built into the wheelhouse (`pip wheel --no-deps`) and the zipped wheelhouse is cached
  in S3 under `wheelhouse/<researcher>/<hash of the requirements and platform>/`, one
  researcher's cache (a wheel one job stores runs only in its own researcher's jobs). Warm
  (a resume, a rerun by the same researcher), the wheelhouse comes from S3 and
  `pip install --no-index --find-links` never asks the index.
- pip refusing the requirements (no such version, a conflict) is `EnvironmentBuildError`: the
  job's input is at fault, so the agent fails the job once with pip's message.

Every pip call is an argv list; the requirements reach pip in a file, one checked line each
(`respot.spec.requirements`), never as options.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import ClientError

from respot.spec.requirements import (
    RequirementsError,
    check_requirement,
    parse_requirements,
    requirements_hash,
)
from respot.storage import layout

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from respot.spec.training import TrainingEnvVar

logger = logging.getLogger(__name__)

PIP_TIMEOUT_SECONDS = 1800.0
PIP_TAIL_LINES = 30
# The index settings pip would otherwise take from the environment: never used warm.
_INDEX_VARIABLES = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX")

Wheelhouse = Literal["cold", "cached"]


class EnvironmentBuildError(RuntimeError):
    """The job's environment cannot be built from its own input: not worth another instance."""

    def __init__(self, reason: str, log_tail: list[str]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.log_tail = log_tail


@dataclass(frozen=True)
class JobPython:
    """The interpreter that runs the session, and how it was made."""

    python: str
    requirements: tuple[str, ...] = ()
    wheelhouse: Wheelhouse | None = None
    seconds: float = 0.0


def job_requirements(spec: TrainingEnvVar, code_dir: Path) -> list[str]:
    """The spec's requirements: its list, or its file read from the unpacked source_dir."""
    if spec.requirements is None:
        return []
    if isinstance(spec.requirements, list):
        # Checked again here, as the file's lines are, before any line reaches pip: the spec
        # was validated on the laptop and by the control plane, but pip must never read an
        # option from a requirement (defense in depth).
        try:
            return [check_requirement(item) for item in spec.requirements]
        except RequirementsError as exc:
            raise EnvironmentBuildError(f"requirements: {exc}", []) from None
    path = (code_dir / spec.requirements).resolve()
    if not path.is_relative_to(code_dir.resolve()) or not path.is_file():
        raise EnvironmentBuildError(
            f"requirements file {spec.requirements!r} is not in the job's source_dir", []
        )
    try:
        return parse_requirements(path.read_text())
    except (RequirementsError, UnicodeDecodeError) as exc:
        raise EnvironmentBuildError(f"requirements file {spec.requirements}: {exc}", []) from None


def prepare(
    spec: TrainingEnvVar,
    *,
    framework_python: str,
    code_dir: Path,
    env_dir: Path,
    s3: S3Client,
    bucket: str,
    scope: str,
    framework_name: str | None = None,
) -> JobPython:
    """The job's Python: the framework's, or a venv on it with the requirements installed.

    `scope`: whose wheelhouse (`layout.wheelhouse_scope` of the job's submitter); `s3` holds
    the job's credentials where they are vended, whose session policy names that prefix alone.
    `framework_name` is the framework Python's name in the AMI contract (the same on every
    instance of a deployment); it keys the wheelhouse, with the Python version and machine.
    """
    started = time.monotonic()
    requirements = job_requirements(spec, code_dir)
    if not requirements:
        return JobPython(python=framework_python)
    python = make_venv(framework_python, env_dir)
    tags = platform_tags(framework_python, framework_name)
    key = layout.wheelhouse_key(scope, requirements_hash(requirements, *tags))
    req_file = env_dir / "requirements.txt"
    req_file.write_text("".join(f"{r}\n" for r in requirements))
    wheels = env_dir / "wheelhouse"
    how: Wheelhouse = "cold"
    if fetch_wheelhouse(s3, bucket, key, wheels):
        try:
            install_from(python, req_file, wheels)
            how = "cached"
        except EnvironmentBuildError as exc:
            # A stale wheelhouse (the AMI changed): build it again from the index.
            logger.warning("the cached wheelhouse did not install (%s); rebuilding", exc.reason)
            shutil.rmtree(wheels, ignore_errors=True)
    if how == "cold":
        build_wheelhouse(python, req_file, wheels)
        install_from(python, req_file, wheels)
        store_wheelhouse(s3, bucket, key, wheels)
    seconds = time.monotonic() - started
    logger.info(
        "job environment: %d requirement(s) from the %s wheelhouse in %.2fs (%s)",
        len(requirements),
        how,
        seconds,
        key,
    )
    return JobPython(python, tuple(requirements), how, seconds)


def platform_tags(framework_python: str, name: str | None = None) -> tuple[str, ...]:
    """What a wheelhouse depends on besides the requirements: Python, machine, framework."""
    version = _run([framework_python, "-c", "import sys; print(sys.version.split()[0])"])
    return (version.strip(), platform.machine(), name or framework_python)


def make_venv(framework_python: str, env_dir: Path) -> str:
    """A venv on the framework Python that sees the framework's packages (and pip)."""
    venv = env_dir / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    env_dir.mkdir(parents=True, exist_ok=True)
    _run([framework_python, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)])
    python = str(venv / "bin" / "python")
    listing = _run(
        [framework_python, "-c", "import site, sys; print('\\n'.join(site.getsitepackages()))"]
    )
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    lines = [f"import site; site.addsitedir({d!r})" for d in listing.split() if d]
    Path(purelib.strip(), "respot-framework.pth").write_text("\n".join(lines) + "\n")
    return python


def build_wheelhouse(python: str, req_file: Path, wheels: Path) -> None:
    """Resolve against the index; put a wheel of each package the framework lacks in `wheels`."""
    wheels.mkdir(parents=True, exist_ok=True)
    report = req_file.with_name("resolution.json")
    _pip(
        python,
        ["install", "--dry-run", "--quiet", "--report", str(report), "-r", str(req_file)],
        "pip could not resolve the requirements",
    )
    items = json.loads(report.read_text()).get("install", [])
    pins = [f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items]
    if pins:
        _pip(
            python,
            ["wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), *pins],
            "pip could not build the wheels",
        )


def install_from(python: str, req_file: Path, wheels: Path) -> None:
    """Install the requirements from the wheelhouse alone (no index)."""
    _pip(
        python,
        ["install", "--quiet", "--no-index", "--find-links", str(wheels), "-r", str(req_file)],
        "pip could not install the requirements from the wheelhouse",
        index=False,
    )


def fetch_wheelhouse(s3: S3Client, bucket: str, key: str, wheels: Path) -> bool:
    """Unpack the cached wheelhouse into `wheels`; False if there is none."""
    archive = wheels.with_suffix(".zip")
    try:
        s3.download_file(bucket, key, str(archive))
    except ClientError as exc:
        logger.info("no cached wheelhouse at %s (%s)", key, exc)
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        logger.warning("reading the wheelhouse failed (%s); building it", exc)
        return False
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():  # flat: wheel files only
            if "/" in name or not name.endswith(".whl"):
                continue
            (wheels / name).write_bytes(zf.read(name))
    archive.unlink()
    return True


def store_wheelhouse(s3: S3Client, bucket: str, key: str, wheels: Path) -> None:
    """Cache the wheelhouse (best effort: the next attempt rebuilds it if this fails)."""
    archive = wheels.with_suffix(".zip")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:
        for wheel in sorted(wheels.glob("*.whl")):
            zf.write(wheel, wheel.name)
    try:
        s3.upload_file(str(archive), bucket, key)
    except Exception as exc:
        logger.warning("caching the wheelhouse at %s failed: %s", key, exc)
    archive.unlink(missing_ok=True)


def _pip(python: str, args: list[str], what: str, *, index: bool = True) -> None:
    env = dict(os.environ)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if not index:
        for name in _INDEX_VARIABLES:
            env.pop(name, None)
    argv = [python, "-m", "pip", *args]
    try:
        result = subprocess.run(  # noqa: S603 - an argv list, checked requirements in a file
            argv,
            capture_output=True,
            text=True,
            env=env,
            timeout=PIP_TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(
            f"{what}: pip ran over {PIP_TIMEOUT_SECONDS:.0f}s", []
        ) from None
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).strip().splitlines()
        errors = [ln for ln in lines if ln.startswith("ERROR")]
        summary = errors[0] if errors else (lines[-1] if lines else f"exit {result.returncode}")
        raise EnvironmentBuildError(f"{what}: {summary}", lines[-PIP_TAIL_LINES:])


def _run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise EnvironmentBuildError(
            f"{argv[0]} failed ({' '.join(argv[1:3])}): {result.stderr.strip()[-500:]}",
            result.stderr.splitlines()[-PIP_TAIL_LINES:],
        )
    return result.stdout


__all__ = ["EnvironmentBuildError", "JobPython", "job_requirements", "prepare"]
