"""A local instance's machine: a directory laid out like the AMI, where its user data runs.

`LocalImage` is built once per runtime and stands for the AMI:
- the framework Python (`/opt/pytorch/bin/python` on the PyTorch DLAMI): a venv of this
  interpreter that sees this checkout's third-party packages (torch among them), as the
  DLAMI's does, and NOT respot (nor `infra`, `lambdas`): on the AMI respot exists only in the
  agent package, so a process the framework Python starts on its own (a notebook's kernel)
  finds respot only if the agent gives it (`framework_site`);
- the agent package as the stack ships it (`site-<python>/respot`), uploaded to the emulator's
  S3 and named in the user data. Its third-party packages are this checkout's (a `.pth` the
  agent's `site.addsitedir` reads), instead of the wheels the CDK asset bundles.

`InstanceRoot` is one instance's `/` (every absolute path the user data writes is under it,
through `RESPOT_ROOT`): `/opt/pytorch` links to the image's framework, and `/usr/bin` holds the
stand-ins of `infra/local/fakes.py` (systemctl, shutdown, nvidia-smi, docker). Nothing here
starts the agent: the user data does, through the fake systemd, as on EC2.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import shutil
import site
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import respot

FAKES = Path(__file__).resolve().parent / "fakes.py"
FAKE_COMMANDS = {
    "usr/bin/systemctl": "systemctl",
    "usr/sbin/shutdown": "shutdown",
    "usr/bin/nvidia-smi": "nvidia-smi",
    "usr/bin/docker": "docker",
}
FRAMEWORK_PYTHON = "/opt/pytorch/bin/python"  # the stack's default (infra.settings)
POWEROFF_MARKER = "run/poweroff"
BOOT_LOG = "var/log/respot-bootstrap.log"
AGENT_JOURNAL = "var/log/journal/respot-agent.log"
USER_DATA = "var/lib/cloud/instance/user-data.txt"
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def _link_data(framework: Path, data: Path) -> None:
    """`<framework>/share/jupyter` -> this checkout's `data` (if it has one)."""
    if not data.is_dir():
        return
    link = framework / "share" / "jupyter"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.resolve() == data.resolve():
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        shutil.rmtree(link)
    link.symlink_to(data, target_is_directory=True)


def _package_zip() -> bytes:
    """The agent package: `site-<python>/respot/...` plus a .pth to this checkout's packages."""
    source = Path(respot.__file__).resolve().parent
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, f"site-{PYTHON_VERSION}/respot/{path.relative_to(source)}")
        deps = "\n".join(f'import site; site.addsitedir("{p}")' for p in site.getsitepackages())
        zf.writestr(f"site-{PYTHON_VERSION}/respot-local-deps.pth", deps + "\n")
    return buf.getvalue()


def _respot_own(name: str) -> bool:
    """An entry of site-packages that is respot's own (its packages, its dist-info, an editable
    install's finder and .pth): left out of the framework Python's view, as on the AMI."""
    return (
        name in ("respot", "infra", "lambdas")
        or name.startswith(("__editable__.respot-", "__editable___respot_"))
        or (name.startswith("respot-") and name.endswith((".dist-info", ".egg-info")))
    )


def framework_site(directory: Path) -> Path:
    """A site directory of links to every entry of this checkout's site-packages except
    respot's own (its package, its dist-info, its editable install's hooks)."""
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for packages in map(Path, site.getsitepackages()):
        if not packages.is_dir():
            continue
        for entry in sorted(packages.iterdir()):
            if _respot_own(entry.name):
                continue
            link = directory / entry.name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(entry, target_is_directory=entry.is_dir())
    return directory


@dataclass
class LocalImage:
    """The AMI stand-in shared by every local instance of one runtime."""

    root: Path
    framework_dir: Path
    asset_bucket: str
    asset_key: str

    @classmethod
    def build(cls, root: Path, s3: Any, bucket: str, key: str | None = None) -> LocalImage:
        """Make the framework venv and upload the agent package to `bucket` (at `key`: where
        the stack's instance role may read it, when IAM is enforced)."""
        root.mkdir(parents=True, exist_ok=True)
        framework = root / "pytorch"
        if not (framework / "bin" / "python").exists():
            subprocess.run(  # noqa: S603 - fixed argv
                [sys.executable, "-m", "venv", "--without-pip", str(framework)],
                check=True,
                capture_output=True,
            )
        purelib = subprocess.run(  # noqa: S603
            [
                str(framework / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        # The framework's packages: this checkout's (torch, numpy, pip, boto3 ...), less respot;
        # written on every build, so a kept --work-root gets this layout too.
        shared = framework_site(root / "framework-site")
        Path(purelib, "framework.pth").write_text(f'import site; site.addsitedir("{shared}")\n')
        # ... and their data files, as a venv they were installed into has them (JupyterLab's
        # application assets in share/jupyter/lab: without them /lab answers "JupyterLab
        # application assets not found", which a browser shows and the REST API does not)
        _link_data(framework, Path(sys.prefix) / "share" / "jupyter")
        package = _package_zip()
        key = key or f"agent/{hashlib.sha256(package).hexdigest()[:16]}.zip"
        with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
            s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key=key, Body=package)
        return cls(root=root, framework_dir=framework, asset_bucket=bucket, asset_key=key)

    def environment(self) -> dict[str, str]:
        """What the image contributes to the env file of the user data."""
        return {
            "RESPOT_AGENT_ASSET_BUCKET": self.asset_bucket,
            "RESPOT_AGENT_ASSET_KEY": self.asset_key,
            "RESPOT_FRAMEWORK_PYTHON": FRAMEWORK_PYTHON,
        }


@dataclass
class InstanceRoot:
    """One local instance's `/`."""

    path: Path

    @classmethod
    def create(cls, path: Path, image: LocalImage) -> InstanceRoot:
        """The directories and stand-ins the AMI has."""
        for d in ("etc", "opt", "run", "tmp", "var/log", "var/lib/cloud/instance", "root"):
            (path / d).mkdir(parents=True, exist_ok=True)
        framework = path / FRAMEWORK_PYTHON.lstrip("/")
        framework.parent.parent.parent.mkdir(parents=True, exist_ok=True)
        link = framework.parent.parent  # <root>/opt/pytorch
        if not link.exists():
            link.symlink_to(image.framework_dir)
        for relative, name in FAKE_COMMANDS.items():
            target = path / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKES}" {name} "$@"\n')
            target.chmod(0o755)
        return cls(path)

    def machine_environment(self, extra: dict[str, str]) -> dict[str, str]:
        """The environment the machine gives its processes (systemd passes it to units)."""
        bins = [self.path / d for d in ("usr/local/bin", "usr/bin", "usr/sbin")]
        return {
            "PATH": ":".join([*(str(b) for b in bins), "/usr/bin", "/bin"]),
            "HOME": str(self.path / "root"),
            "LANG": "C.UTF-8",
            "RESPOT_ROOT": str(self.path),
            "RESPOT_FAKE_IMAGE_PYTHON": str(self.path / FRAMEWORK_PYTHON.lstrip("/")),
            **extra,
        }

    def run_user_data(self, user_data: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Run the user data as cloud-init does (its own process group: killed as a whole)."""
        script = self.path / USER_DATA
        script.write_text(user_data)
        with (self.path / "var/log/cloud-init-output.log").open("ab") as out:
            return subprocess.Popen(  # noqa: S603 - bash and the launch template's user data
                ["/bin/bash", str(script)],
                env=env,
                cwd=str(self.path),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def powered_off(self) -> str | None:
        """Why the machine powered itself off, if it did."""
        marker = self.path / POWEROFF_MARKER
        try:
            return marker.read_text().strip() or "poweroff"
        except FileNotFoundError:
            return None

    @property
    def agent_up(self) -> bool:
        """The agent has its job ready (its journal has the `started:` line of AgentStarted)."""
        try:
            with (self.path / AGENT_JOURNAL).open("rb") as journal:
                return b" respot.agent: started: " in journal.read()
        except FileNotFoundError:
            return False

    def log(self, relative: str) -> str:
        """A log file of the machine (BOOT_LOG, AGENT_JOURNAL), or '' if absent."""
        try:
            return (self.path / relative).read_text(errors="replace")
        except FileNotFoundError:
            return ""


def remove(path: Path) -> None:
    """Delete an instance root (symlinks are removed, never followed)."""
    if path.is_symlink():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


__all__ = ["FRAMEWORK_PYTHON", "InstanceRoot", "LocalImage"]
