"""Preparing a job on the instance: code zip checks, safe unzip, data sources, handoff wait."""

from __future__ import annotations

import hashlib
import io
import stat
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from respot.agent.exceptions import SetupError
from respot.agent.workspace import fetch_code, fetch_data, safe_extract, wait_for_object
from respot.spec.training import DataSourceEnvVar
from respot.wire.messages import CodeArtifact


def make_zip(path: Path, entries: dict[str, bytes], *, link: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
        if link is not None:
            info = zipfile.ZipInfo(link)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return path


def test_safe_extract_unpacks_a_normal_tree(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "ok.zip", {"pkg/__init__.py": b"", "pkg/train.py": b"x = 1\n"})
    safe_extract(archive, tmp_path / "code")
    assert (tmp_path / "code" / "pkg" / "train.py").read_bytes() == b"x = 1\n"


@pytest.mark.parametrize(
    "name",
    [
        "../evil.py",  # hostile-path
        "pkg/../../evil.py",  # hostile-path
        "/abs/evil.py",
        "C:/evil.py",
        "..\\evil.py",
    ],
)
def test_safe_extract_refuses_entries_that_escape(tmp_path: Path, name: str) -> None:
    archive = make_zip(tmp_path / "bad.zip", {"ok.py": b"", name: b"pwned"})
    with pytest.raises(SetupError, match=r"unsafe entry|escapes"):
        safe_extract(archive, tmp_path / "deep" / "code")
    assert not list(tmp_path.rglob("evil.py"))


def test_safe_extract_refuses_symbolic_links(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "link.zip", {"ok.py": b""}, link="passwd")
    with pytest.raises(SetupError, match="symbolic link"):
        safe_extract(archive, tmp_path / "code")


def test_fetch_code_checks_the_digest(s3: Any, bucket: str, tmp_path: Path) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("job.py", "print('hi')\n")
    data = buf.getvalue()
    s3.put_object(Bucket=bucket, Key="code.zip", Body=data)
    good = CodeArtifact(
        s3_uri=f"s3://{bucket}/code.zip",
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
    )
    fetch_code(s3, good, tmp_path / "code", tmp_path)
    assert (tmp_path / "code" / "job.py").exists()
    bad = good.model_copy(update={"sha256": "0" * 64})
    with pytest.raises(SetupError, match="does not match"):
        fetch_code(s3, bad, tmp_path / "code2", tmp_path)
    assert not (tmp_path / "code2").exists()


def test_fetch_data_gets_a_prefix_tree_and_a_single_object(
    s3: Any, bucket: str, tmp_path: Path
) -> None:
    s3.put_object(Bucket=bucket, Key="ds/train/a.bin", Body=b"aaa")
    s3.put_object(Bucket=bucket, Key="ds/train/sub/b.bin", Body=b"bb")
    s3.put_object(Bucket=bucket, Key="ds/train/", Body=b"")  # a console "folder" marker
    s3.put_object(Bucket=bucket, Key="ds/labels.csv", Body=b"x,y\n")
    sources = [
        DataSourceEnvVar(s3_uri=f"s3://{bucket}/ds/train/", local_path="train"),
        DataSourceEnvVar(s3_uri=f"s3://{bucket}/ds/labels.csv", local_path="meta"),
        # A key without a trailing slash that is not an object: a prefix.
        DataSourceEnvVar(s3_uri=f"s3://{bucket}/ds/train", local_path="again"),
    ]
    fetched = fetch_data(s3, sources, tmp_path / "data")
    files = sorted(
        p.relative_to(tmp_path / "data").as_posix()
        for p in (tmp_path / "data").rglob("*")
        if p.is_file()
    )
    assert files == [
        "again/a.bin",
        "again/sub/b.bin",
        "meta/labels.csv",
        "train/a.bin",
        "train/sub/b.bin",
    ]
    assert (tmp_path / "data" / "train" / "sub" / "b.bin").read_bytes() == b"bb"
    assert fetched == 3 + 2 + 4 + 3 + 2


def test_fetch_data_refuses_an_empty_source(s3: Any, bucket: str, tmp_path: Path) -> None:
    source = DataSourceEnvVar(s3_uri=f"s3://{bucket}/nothing/", local_path="x")
    with pytest.raises(SetupError, match="has no objects"):
        fetch_data(s3, [source], tmp_path / "data")


def test_wait_for_object_times_out_or_sees_the_marker(s3: Any, bucket: str) -> None:
    t0 = time.monotonic()
    assert not wait_for_object(
        s3, bucket, "handoff/0001.json", timeout_seconds=0.5, poll_seconds=0.1
    )
    assert time.monotonic() - t0 >= 0.5  # not before its bound
    timer = threading.Timer(
        0.3, lambda: s3.put_object(Bucket=bucket, Key="handoff/0001.json", Body=b"{}")
    )
    timer.start()
    # the bound is far beyond the marker's 0.3 s: True can only come from the marker
    assert wait_for_object(s3, bucket, "handoff/0001.json", timeout_seconds=120, poll_seconds=0.1)
    timer.join()
    # give_up() ends the wait at once (an interruption notice arrived meanwhile): the first
    # time it is asked, and it is not asked again
    asked: list[int] = []
    assert not wait_for_object(
        s3, bucket, "never", timeout_seconds=120, give_up=lambda: not asked.append(1)
    )
    assert asked == [1]
