"""How respot's code becomes CDK assets: local bundling only (these machines have no Docker).

Two assets are built from the checkout, both by copying `sdk/respot` (and, for Lambda,
`lambdas/`) next to third-party packages that `uv pip install --target --python-platform ...`
fetched for the target runtime (uv rather than pip: a fifth of the time, docs/decisions.md):

- the Lambda code: one asset shared by every function (arm64, Python 3.12);
- the agent package for the GPU instances: a `site-<python>` directory per supported
  interpreter (x86_64), so an instance needs neither pip nor PyPI to start the agent.

The third-party packages are cached under `.build/deps/<hash>/` keyed by the pinned
requirement list, the platform and the Python version, so only the first synth downloads.
Each asset's hash is computed here from the files it ships (not from the whole checkout),
and CDK reuses `cdk.out/asset.<hash>` when it already exists.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import jsii

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = REPO_ROOT / ".build"
BUNDLING_VERSION = "1"  # bump to invalidate every cached asset after changing this module

LAMBDA_PYTHON = "3.12"
LAMBDA_PLATFORM = "manylinux2014_aarch64"  # functions run on arm64 (Graviton)
# boto3/botocore come with the Lambda runtime; everything else the handlers import is here.
LAMBDA_REQUIREMENTS = ("aws-lambda-powertools", "pydantic", "slack-sdk", "optuna")

AGENT_PYTHONS = ("3.11", "3.12")  # respot needs >= 3.11; the default AMI has 3.12
AGENT_PLATFORM = "manylinux2014_x86_64"  # g5/g4dn are x86_64

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", ".mypy_cache")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*==\s*([^\s;#]+)")
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class BundlingError(RuntimeError):
    """Building an asset failed (uv could not fetch a package, a source is missing...)."""


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned(names: tuple[str, ...] | list[str], root: Path = REPO_ROOT) -> tuple[str, ...]:
    """`name==version` for each name, with the version pinned in requirements.txt."""
    pins: dict[str, str] = {}
    for line in (root / "requirements.txt").read_text().splitlines():
        if m := _PIN.match(line):
            pins[_normalize(m.group(1))] = f"{m.group(1)}=={m.group(2)}"
    return tuple(sorted(pins.get(_normalize(n), n) for n in names))


def package_dependencies(root: Path = REPO_ROOT) -> tuple[str, ...]:
    """The names in pyproject's [project] dependencies: what `respot` needs to run."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    names = []
    for spec in project.get("dependencies", []):
        if m := _NAME.match(spec):
            names.append(m.group(1))
    return tuple(names)


def fingerprint(paths: list[Path], *extra: str) -> str:
    """SHA-256 over the relative names and bytes of every file under `paths`, plus `extra`."""
    h = hashlib.sha256(BUNDLING_VERSION.encode())
    for root in paths:
        if not root.exists():
            raise BundlingError(f"{root} does not exist")
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if not f.is_file() or "__pycache__" in f.parts or f.suffix in (".pyc", ".pyo"):
                continue
            h.update(str(f.relative_to(root.parent)).encode())
            h.update(b"\0")
            h.update(f.read_bytes())
    for item in extra:
        h.update(item.encode())
        h.update(b"\0")
    return h.hexdigest()


def third_party(requirements: tuple[str, ...], *, platform: str, python: str) -> Path:
    """A directory of these packages installed for `platform`/`python`, built once and cached."""
    key = hashlib.sha256("\n".join((platform, python, *requirements)).encode()).hexdigest()
    target = BUILD_DIR / "deps" / f"{platform}-py{python}-{key[:16]}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    tag, _, arch = platform.partition("_")  # manylinux2014_aarch64 -> aarch64-manylinux2014
    command = [
        sys.executable,
        "-m",
        "uv",
        "pip",
        "install",
        "--quiet",
        "--target",
        str(staging),
        "--python-platform",
        f"{arch}-{tag}",
        "--python-version",
        python,
        "--only-binary",
        ":all:",
        *requirements,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundlingError(
            f"uv could not install {' '.join(requirements)} for {platform} / Python {python}:\n"
            f"{result.stderr[-4000:]}"
        )
    shutil.rmtree(staging / "bin", ignore_errors=True)  # console scripts: unused, host paths
    try:
        staging.rename(target)
    except OSError:  # another synth finished the same directory first: use that one
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _copy_into(source: Path, destination: Path) -> None:
    shutil.copytree(source, destination, ignore=_IGNORED, dirs_exist_ok=True)


@dataclass(frozen=True)
class _Layout:
    """One directory of the asset: third-party packages plus respot's own packages."""

    subdir: str  # "" for the asset root
    requirements: tuple[str, ...]
    platform: str
    python: str
    packages: tuple[tuple[Path, str], ...]  # (source directory, package name in the asset)


# Every layout an asset of this process declared. The first bundle builds all their
# third-party directories side by side rather than one at a time.
_DECLARED: list[_Layout] = []
_DECLARED_LOCK = threading.Lock()


def _build_declared() -> None:
    with _DECLARED_LOCK:
        declared = list(dict.fromkeys(_DECLARED))
        _DECLARED.clear()
    if len(declared) < 2:
        return  # nothing to overlap: the bundle builds its one directory itself
    with ThreadPoolExecutor(max_workers=len(declared), thread_name_prefix="uv") as pool:
        for done in [
            pool.submit(third_party, lay.requirements, platform=lay.platform, python=lay.python)
            for lay in declared
        ]:
            done.result()  # a BundlingError names the platform and the packages


@jsii.implements(cdk.ILocalBundling)
class _LocalBundle:
    """Builds an asset directory on this machine: what CDK calls instead of Docker."""

    def __init__(self, layouts: tuple[_Layout, ...]) -> None:
        self._layouts = layouts

    def try_bundle(self, output_dir: str, *, image: Any = None, **_: Any) -> bool:
        _build_declared()
        out = Path(output_dir)
        for layout in self._layouts:
            site = out / layout.subdir if layout.subdir else out
            site.mkdir(parents=True, exist_ok=True)
            deps = third_party(layout.requirements, platform=layout.platform, python=layout.python)
            _copy_into(deps, site)
            for source, name in layout.packages:
                _copy_into(source, site / name)
        return True


@dataclass(frozen=True)
class LocalAsset:
    """What `Code.from_asset` / `s3_assets.Asset` need for one locally bundled asset."""

    path: str
    asset_hash: str
    bundling: cdk.BundlingOptions

    def asset_options(self) -> dict[str, Any]:
        """Keyword arguments shared by `lambda_.Code.from_asset` and `s3_assets.Asset`."""
        return {
            "path": self.path,
            "asset_hash": self.asset_hash,
            "asset_hash_type": cdk.AssetHashType.CUSTOM,
            "bundling": self.bundling,
        }


def _local_asset(layouts: tuple[_Layout, ...], root: Path) -> LocalAsset:
    sources = sorted({source for layout in layouts for source, _ in layout.packages})
    pins = [
        f"{lay.subdir}|{lay.platform}|{lay.python}|{','.join(lay.requirements)}" for lay in layouts
    ]
    with _DECLARED_LOCK:
        _DECLARED.extend(layouts)
    return LocalAsset(
        path=str(root),
        asset_hash=fingerprint(sources, *pins),
        bundling=cdk.BundlingOptions(
            # Never pulled: local bundling always succeeds or raises. CDK requires an image.
            image=cdk.DockerImage.from_registry("public.ecr.aws/sam/build-python3.12"),
            local=_LocalBundle(layouts),
        ),
    )


def lambda_code_asset(root: Path = REPO_ROOT) -> LocalAsset:
    """The one asset every control-plane function runs: respot, lambdas and their packages."""
    layout = _Layout(
        subdir="",
        requirements=pinned(LAMBDA_REQUIREMENTS, root),
        platform=LAMBDA_PLATFORM,
        python=LAMBDA_PYTHON,
        packages=((root / "sdk" / "respot", "respot"), (root / "lambdas", "lambdas")),
    )
    return _local_asset((layout,), root)


# Packages the agent uses when present: TensorBoard event files from report(), GPU telemetry
# (NVML), notebooks run by Papermill in an IPython kernel (docs/agent.md).
AGENT_EXTRAS = ("tensorboard", "nvidia-ml-py", "papermill", "ipykernel")


def agent_package_asset(root: Path = REPO_ROOT) -> LocalAsset:
    """The agent for the instances: `site-<python>/` holds respot and its packages, per Python."""
    requirements = pinned((*package_dependencies(root), *AGENT_EXTRAS), root)
    layouts = tuple(
        _Layout(
            subdir=f"site-{python}",
            requirements=requirements,
            platform=AGENT_PLATFORM,
            python=python,
            packages=((root / "sdk" / "respot", "respot"),),
        )
        for python in AGENT_PYTHONS
    )
    return _local_asset(layouts, root)


__all__ = [
    "AGENT_PYTHONS",
    "LAMBDA_PYTHON",
    "BundlingError",
    "LocalAsset",
    "agent_package_asset",
    "lambda_code_asset",
]
