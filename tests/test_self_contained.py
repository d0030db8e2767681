"""The repository stands alone: no tracked file outside docs reaches for a path beyond it.

A fresh `git clone` has nothing beside it, so code, tests, benchmarks, the demo and build
files may name only paths inside the checkout. Docs (`docs/`, `*.md`) may cite sources.
Relative paths in code, scripts and build files are taken from the root (the cwd of `make`
and CI), so any `../` leaves the checkout. A line whose `../` is hostile *input* under test
(a path-traversal attempt) says so with the marker `hostile-path`.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# `../x` path text, and Path(__file__).parents[N] / .parent chains climbing out of the root.
RELATIVE = re.compile(r"(?<![\w.])((?:\.\./)+)[\w.-]")
PARENTS_INDEX = re.compile(r"__file__\)?(?:\.resolve\(\))?\.parents\[(\d+)\]")
PARENT_CHAIN = re.compile(r"__file__\)?(?:\.resolve\(\))?((?:\.parent)+)")
ABSOLUTE_WORKPLACE = re.compile(r"(?<![\w/])/(?:work|opt/pypi)/")


def tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [Path(p) for p in out.split("\0") if p]


def is_doc(path: Path) -> bool:
    return path.parts[0] == "docs" or path.suffix in {".md", ".png", ".svg"}


def outside_references(rel: Path, text: str) -> list[str]:
    """The references in one file's text that resolve outside the repository root."""
    found: list[str] = []
    depth = len(rel.parts) - 1  # folders between the root and the file
    for line in text.splitlines():
        if "hostile-path" not in line:
            found.extend(m.group(0) for m in RELATIVE.finditer(line))
    if rel.suffix == ".py":
        for match in PARENTS_INDEX.finditer(text):
            if int(match.group(1)) > depth:
                found.append(match.group(0))
        for match in PARENT_CHAIN.finditer(text):
            if match.group(1).count(".parent") > depth + 1:
                found.append(match.group(0))
    found.extend(m.group(0) for m in ABSOLUTE_WORKPLACE.finditer(text))
    return found


def test_no_tracked_file_outside_docs_reads_beyond_the_repository() -> None:
    # GIVEN every tracked file that is not documentation
    offenders: dict[str, list[str]] = {}
    for rel in tracked_files():
        if is_doc(rel) or rel == Path(__file__).relative_to(ROOT):
            continue
        try:
            text = (ROOT / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue  # binary files name no paths
        # WHEN its path references are resolved against its place in the tree
        refs = outside_references(rel, text)
        if refs:
            offenders[str(rel)] = refs
    # THEN none climbs out of the checkout
    assert offenders == {}, f"files that read outside the repository: {offenders}"


@pytest.mark.parametrize(
    ("rel", "text", "bad"),
    [
        ("tests/conftest.py", 'SHARED = ROOT.parent / "x"\nopen("../shared/a.json")', True),
        ("tests/agent/test_x.py", "Path(__file__).resolve().parents[3] / 'shared'", True),
        ("tests/agent/test_x.py", "Path(__file__).resolve().parents[2] / 'bench'", False),
        ("bench/x.py", "Path(__file__).parent.parent.parent / 'shared'", True),
        ("bench/x.py", "Path(__file__).parent.parent / 'traces'", False),
        ("Makefile", "cp ../shared/traces .", True),
        ("bench/policy/x.py", "'../traces/a.json'", True),
        ("tests/x.py", "bad = '../../etc'  # hostile-path: traversal must be refused", False),
        ("bench/x.py", "'bench/traces/aws'", False),
        ("tests/x.py", "'/work/shared/traces'", True),
    ],
)
def test_the_check_itself_catches_outside_paths(rel: str, text: str, bad: bool) -> None:
    # The guard above must be able to fail: each known way out is caught, inside paths are not.
    assert bool(outside_references(Path(rel), text)) is bad
