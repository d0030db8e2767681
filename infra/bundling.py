"""How respot's code becomes CDK assets: local bundling only (these machines have no Docker).

Two assets are built from the checkout, both by copying `sdk/respot` (and, for Lambda,
`lambdas/`) next to third-party packages that `uv pip install --target --python-platform ...`
fetched for the target runtime (uv rather than pip: a fifth of the time, docs/decisions.md):

- the Lambda code: one asset shared by every function (arm64, Python 3.12);
- the agent package for the GPU instances: one `site-<python>` directory for the AMI's
  framework Python (`framework_python_version`, x86_64), so an instance needs neither pip nor
  PyPI to start the agent.

Every third-party version is the one the tests run with: `infra/bundle-constraints.txt`
pins the whole dependency closure of both assets (transitive packages included) to the
versions installed in this checkout's .venv, and uv installs under it (`--constraint`).
`python -m infra.bundling constraints` rewrites it after `requirements.txt` changes;
`tests/infra/test_bundling.py` fails while it is stale. The Lambda asset carries the boto3
and botocore the tests use, not the runtime's (the function's own directory comes first on
the path).

The third-party packages are cached under `.build/deps/<hash>/` keyed by the pinned
requirement list, the constraints, the platform and the Python version, so only the first
synth downloads.
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

from infra.settings import DEFAULT_FRAMEWORK_PYTHON_VERSION

REPO_ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = REPO_ROOT / ".build"
BUNDLING_VERSION = "2"  # bump to invalidate every cached asset after changing this module

LAMBDA_PYTHON = "3.12"
# Functions run on arm64 (Graviton), Python 3.12 on Amazon Linux 2023 (glibc 2.34); the
# instances on the DLAMI's Ubuntu 24.04 (glibc 2.39): both take manylinux_2_28 wheels, which
# some tested versions ship only (pyzmq 27.3, for ipykernel), not manylinux2014's (glibc 2.17).
LAMBDA_PLATFORM = "manylinux_2_28_aarch64"
# What the handlers import. boto3 too: the runtime's own may be older or newer than the one
# the tests ran with, and the bundle's comes first on the path.
LAMBDA_REQUIREMENTS = ("aws-lambda-powertools", "pydantic", "slack-sdk", "optuna", "boto3")

# The agent package is built for one Python, the AMI's framework Python's version
# (`framework_python_version`; the bootstrap refuses another with the setting's name).
DEFAULT_AGENT_PYTHON = DEFAULT_FRAMEWORK_PYTHON_VERSION  # the PyTorch DLAMIs on Ubuntu 24.04
AGENT_PLATFORM = "manylinux_2_28_x86_64"  # g5/g4dn are x86_64
CONSTRAINTS = REPO_ROOT / "infra" / "bundle-constraints.txt"

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


def third_party(
    requirements: tuple[str, ...],
    *,
    platform: str,
    python: str,
    constraints: Path | None = CONSTRAINTS,
) -> Path:
    """A directory of these packages installed for `platform`/`python`, built once and cached,
    every package (transitive ones too) at the version `constraints` pins."""
    pins = constraints.read_text() if constraints is not None else ""
    key = hashlib.sha256("\n".join((platform, python, pins, *requirements)).encode()).hexdigest()
    target = BUILD_DIR / "deps" / f"{platform}-py{python}-{key[:16]}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
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
        uv_platform(platform),
        "--python-version",
        python,
        "--only-binary",
        ":all:",
        *(["--constraint", str(constraints)] if constraints is not None else []),
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


def uv_platform(platform: str) -> str:
    """uv's --python-platform for a wheel platform tag: manylinux_2_28_x86_64 ->
    x86_64-manylinux_2_28."""
    for arch in ("x86_64", "aarch64"):
        if platform.endswith(f"_{arch}"):
            return f"{arch}-{platform.removesuffix(f'_{arch}')}"
    raise BundlingError(f"{platform}: not an x86_64 or aarch64 platform tag")


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
    # The asset's directories of third-party packages ("" for the root, "site-3.12", ...).
    sites: tuple[str, ...] = ()

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
    pins.append(CONSTRAINTS.read_text())
    with _DECLARED_LOCK:
        _DECLARED.extend(layouts)
    return LocalAsset(
        path=str(root),
        asset_hash=fingerprint(sources, *pins),
        sites=tuple(layout.subdir for layout in layouts),
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


def agent_requirements(root: Path = REPO_ROOT) -> tuple[str, ...]:
    """The agent package's third-party requirements, pinned."""
    return pinned((*package_dependencies(root), *AGENT_EXTRAS), root)


def agent_package_asset(root: Path = REPO_ROOT, python: str = DEFAULT_AGENT_PYTHON) -> LocalAsset:
    """The agent for the instances: `site-<python>/` holds respot and its packages, for the one
    Python the AMI's framework runs (`framework_python_version`)."""
    layout = _Layout(
        subdir=f"site-{python}",
        requirements=agent_requirements(root),
        platform=AGENT_PLATFORM,
        python=python,
        packages=((root / "sdk" / "respot", "respot"),),
    )
    return _local_asset((layout,), root)


# ---- the constraints file: the tests' versions of every package the bundles install --------

# Target interpreters the markers of the closure are evaluated for (both assets).
_TARGETS = ({"python_version": LAMBDA_PYTHON}, {"python_version": DEFAULT_AGENT_PYTHON})


def dependency_closure(
    names: tuple[str, ...] | list[str],
) -> tuple[dict[str, str], dict[str, str]]:
    """(found, missing) for `names` and everything they require on the assets' Linux targets:
    found, normalized name -> `Name==version` installed in this interpreter (the tests'
    .venv); missing, normalized name -> the requirement line, for what a target needs that
    this interpreter does not have (a marker such as python_version == "3.12")."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    environments: list[dict[str, str]] = []
    for target in _TARGETS:
        env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
        env.update(
            target,
            python_full_version=f"{target['python_version']}.0",
            sys_platform="linux",
            platform_system="Linux",
            os_name="posix",
        )
        environments.append(env)
    found: dict[str, str] = {}
    missing: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(n, frozenset()) for n in names]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        key = _normalize(name)
        if (key, extras) in seen:
            continue
        seen.add((key, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.setdefault(key, name)
            continue
        found[key] = f"{dist.metadata['Name']}=={dist.version}"
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = any(
                req.marker is None or req.marker.evaluate({**env, "extra": extra})
                for env in environments
                for extra in (extras or {""})
            )
            if not wanted:
                continue
            if _installed(req.name):
                todo.append((req.name, frozenset(req.extras)))
            else:
                missing[_normalize(req.name)] = str(req).split(";")[0].strip()
    return found, {k: v for k, v in missing.items() if k not in found}


def _installed(name: str) -> bool:
    from importlib import metadata

    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _resolve_untested(missing: dict[str, str], tested: dict[str, str]) -> dict[str, str]:
    """Pins for what the tests' .venv lacks: uv resolves it for the agent's target once, under
    the tested pins, and the file records each such line as untested."""
    if not missing:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        given = Path(tmp) / "constraints.txt"
        given.write_text("".join(f"{pin}\n" for pin in tested.values()))
        wanted = Path(tmp) / "wanted.in"
        wanted.write_text("".join(f"{line}\n" for line in missing.values()))
        result = subprocess.run(  # noqa: S603
            [
                sys.executable, "-m", "uv", "pip", "compile", "--quiet", "--no-header",
                "--no-annotate", "--python-version", DEFAULT_AGENT_PYTHON,
                "--python-platform", uv_platform(AGENT_PLATFORM),
                "--constraint", str(given), str(wanted),
            ],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    if result.returncode != 0:
        raise BundlingError(f"uv could not resolve {sorted(missing)}:\n{result.stderr[-2000:]}")
    pins = {}
    for line in result.stdout.splitlines():
        if m := _PIN.match(line):
            key = _normalize(m.group(1))
            if key not in tested:
                pins[key] = f"{m.group(1)}=={m.group(2)}"
    return pins


def constraints_text(root: Path = REPO_ROOT) -> str:
    """The constraints file as it must read for this .venv (see the module docstring)."""
    names = sorted({*LAMBDA_REQUIREMENTS, *package_dependencies(root), *AGENT_EXTRAS})
    tested, missing = dependency_closure(names)
    untested = _resolve_untested(missing, tested)
    header = (
        "# Generated by `python -m infra.bundling constraints` from the .venv the tests run in:\n"
        "# every package the Lambda and agent bundles install, at the version tested. uv\n"
        "# installs the bundles under these constraints (infra/bundling.py). Do not edit.\n"
    )
    body = "".join(f"{tested[k]}\n" for k in sorted(tested))
    if untested:
        body += (
            "# Needed on the targets' Python only (a marker such as python_version == '3.12'),\n"
            "# so not installed in the tests' .venv: pinned by uv at generation, UNTESTED here.\n"
        )
        body += "".join(f"{untested[k]}  # untested\n" for k in sorted(untested))
    return header + body


def main(argv: list[str] | None = None) -> int:
    """`python -m infra.bundling constraints`: rewrite infra/bundle-constraints.txt."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["constraints"]:
        print("usage: python -m infra.bundling constraints", file=sys.stderr)
        return 2
    CONSTRAINTS.write_text(constraints_text())
    print(f"wrote {CONSTRAINTS.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "DEFAULT_AGENT_PYTHON",
    "LAMBDA_PYTHON",
    "BundlingError",
    "LocalAsset",
    "agent_package_asset",
    "lambda_code_asset",
]
