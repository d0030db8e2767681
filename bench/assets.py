"""The sizes of the stack's code assets as `cdk deploy` uploads them.

    .venv/bin/python -m bench.assets                 # synthesizes into a temporary cdk.out
    .venv/bin/python -m bench.assets --cdk-out DIR   # an existing `python app.py` output

For each zip asset of the home stack (the Lambda code, the agent package): files, bytes
unzipped, and bytes zipped with deflate (level 6, as `zip`/zlib's default; CDK zips the
directory at publish time, so its archive may differ by a few percent), and the biggest
top-level entries. Limits it is held to: Lambda 250 MB unzipped (50 MB zipped for a direct
upload; CDK uploads to S3), https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def synthesize(out: Path) -> None:
    env = {
        **os.environ,
        "CDK_OUTDIR": str(out),
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
    }
    result = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(result.stderr[-4000:])


def measure(directory: Path) -> dict[str, object]:
    files = [p for p in sorted(directory.rglob("*")) if p.is_file()]
    unzipped = sum(p.stat().st_size for p in files)
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "asset.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            for p in files:
                zf.write(p, p.relative_to(directory))
        zipped = archive.stat().st_size
    top: dict[str, int] = {}
    for p in files:
        parts = p.relative_to(directory).parts
        key = "/".join(parts[:2]) if parts[0].startswith("site-") and len(parts) > 2 else parts[0]
        top[key] = top.get(key, 0) + p.stat().st_size
    biggest = sorted(top.items(), key=lambda kv: -kv[1])[:6]
    return {"files": len(files), "unzipped": unzipped, "zipped": zipped, "biggest": biggest}


def assets(out: Path) -> dict[str, dict[str, object]]:
    manifest = json.loads((out / "Respot.assets.json").read_text())
    found: dict[str, dict[str, object]] = {}
    for entry in manifest["files"].values():
        source = entry["source"]
        if source.get("packaging") != "zip":
            continue
        directory = out / source["path"]
        name = "agent package" if any(directory.glob("site-*")) else "Lambda code"
        found[name] = measure(directory)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cdk-out", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.cdk_out:
        found = assets(args.cdk_out)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            synthesize(Path(tmp))
            found = assets(Path(tmp))
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    for name, m in found.items():
        mib = 2**20
        top = ", ".join(f"{k} {v / mib:.1f}" for k, v in m["biggest"])  # type: ignore[attr-defined]
        print(
            f"{name}: {m['unzipped'] / mib:.1f} MiB unzipped in {m['files']} files, "  # type: ignore[operator]
            f"{m['zipped'] / mib:.1f} MiB zipped; biggest (MiB): {top}"  # type: ignore[operator]
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
