"""bench.workspace's machinery without S3: the workspaces it makes, the change it applies, the
restore check, and how it turns samples and tool output into results (no timing asserted)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from bench.workspace import data
from bench.workspace.runner import (
    check_restored,
    markdown,
    ratios,
    room_needed,
    summarize,
    tool_order,
)
from bench.workspace.s3server import operation, process_cpu_seconds
from bench.workspace.tools import parse_aws_version, parse_s5cmd_version


def test_small_workspace_is_the_mix_asked_for_and_the_same_for_one_seed(tmp_path: Path) -> None:
    paths = data.write_small(tmp_path / "a", 200, seed=7, min_kib=1, max_kib=20)
    again = data.write_small(tmp_path / "b", 200, seed=7, min_kib=1, max_kib=20)
    first, second = data.tree_digest(tmp_path / "a"), data.tree_digest(tmp_path / "b")
    assert paths == again and sorted(paths) == sorted(first) and len(first) == 200
    assert first == second  # one seed, the same bytes
    assert len(set(first.values())) == 200  # no two files alike (no free dedup for respot)
    sizes = [(tmp_path / "a" / p).stat().st_size for p in paths]
    assert min(sizes) >= 1024 and max(sizes) <= 20 * 1024
    assert np.median(sizes) < 10 * 1024  # log-uniform: most files are small
    suffixes = {Path(p).suffix for p in paths}
    assert suffixes == {".ipynb", ".py", ".csv", ".png", ".md"}
    assert sum(p.endswith(".py") for p in paths) == 70  # 35% of 200
    assert len({str(Path(p).parent) for p in paths}) == 24  # nested: 3+10+5+4+2 folders
    data.write_small(tmp_path / "c", 200, seed=8)
    assert set(data.tree_digest(tmp_path / "c").values()).isdisjoint(first.values())


def test_a_change_of_one_percent_rewrites_ten_of_a_thousand_and_touches_nothing_else(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    data.write_small(root, 1000, seed=1)
    before = data.tree_digest(root)
    mtimes = {p: os.stat(root / p).st_mtime_ns for p in before}
    sizes = {p: os.stat(root / p).st_size for p in before}
    changed = data.change_small(root, 1.0, seed=2)
    after = data.tree_digest(root)
    assert len(changed) == 10 and len(set(changed)) == 10
    assert set(after) == set(before)  # no file added or removed
    assert {p for p in before if before[p] != after[p]} == set(changed)
    for p in changed:
        assert os.stat(root / p).st_size != sizes[p]  # a save changes the size
    for p in set(before) - set(changed):
        assert os.stat(root / p).st_mtime_ns == mtimes[p]
    assert data.change_small(root, 0.01, seed=3) and len(data.change_small(root, 0.01, 4)) == 1


def test_the_big_file_changes_in_place_its_size_kept(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    size = 3 * data.MIB + 5
    assert data.write_big(root, size, seed=1) == [data.BIG_NAME]
    path = root / data.BIG_NAME
    old = path.read_bytes()
    assert len(old) == size and data.tree_bytes(root) == size
    data.change_big(root, 1.0, seed=2)
    new = path.read_bytes()
    assert len(new) == size
    differing = np.flatnonzero(np.frombuffer(old, np.uint8) != np.frombuffer(new, np.uint8))
    span = int(differing[-1] - differing[0] + 1)
    assert 0.9 * size / 100 <= span <= size / 100 + 1  # one region of 1% of the bytes


def test_a_restore_is_checked_file_by_file() -> None:
    want = {"a": "1", "b": "2"}
    check_restored(want, dict(want), "tool")
    with pytest.raises(RuntimeError, match=r"missing \['b'\]"):
        check_restored(want, {"a": "1"}, "tool")
    with pytest.raises(RuntimeError, match=r"different \['a'\]"):
        check_restored(want, {"a": "x", "b": "2"}, "tool")
    with pytest.raises(RuntimeError, match=r"extra \['c'\]"):
        check_restored(want, {**want, "c": "3"}, "tool")


def _sample(seconds: float, **more: float) -> dict[str, float]:
    return {"seconds": seconds, "client_cpu_s": seconds / 2, "moto_cpu_s": seconds / 4, **more}


def test_samples_become_median_rows_in_dataset_scenario_tool_order() -> None:
    samples = {
        ("big", "first", "respot"): [_sample(4.0, snapshot_s=1.0, upload_s=3.0, bytes_sent=8)],
        ("small", "restore", "aws s3 sync"): [_sample(3.0), _sample(1.0), _sample(2.0)],
        ("small", "restore", "respot"): [
            _sample(1.0, snapshot_s=0.0, upload_s=0.0, bytes_sent=0),
            _sample(3.0, snapshot_s=0.0, upload_s=0.0, bytes_sent=0),
        ],
        ("small", "first", "s5cmd sync"): [_sample(5.0)],
    }
    rows = summarize(samples)
    assert [(r["dataset"], r["scenario"], r["tool"]) for r in rows] == [
        ("small", "first", "s5cmd sync"),
        ("small", "restore", "respot"),
        ("small", "restore", "aws s3 sync"),
        ("big", "first", "respot"),
    ]
    aws = rows[2]
    assert (aws["runs"], aws["median_s"], aws["min_s"], aws["max_s"]) == (3, 2.0, 1.0, 3.0)
    assert aws["client_cpu_s"] == 1.0 and aws["moto_cpu_s"] == 0.5
    assert "snapshot_s" not in aws
    assert rows[1]["median_s"] == 2.0  # two samples: their mean
    assert rows[3]["bytes_sent"] == 8 and rows[3]["upload_s"] == 3.0
    assert ratios(rows) == [
        {
            "dataset": "small",
            "scenario": "restore",
            "against": "aws s3 sync",
            "respot_over_tool": 1.0,
        }
    ]
    payload = {
        "repeats": 3,
        "order": "alternating",
        "datasets": {"small": {"what": "w", "change": "c"}},
        "tools": {"respot": "r"},
        "transfer": "t",
        "model": "m",
        "rows": rows,
        "respot_over_tool": ratios(rows),
        "emulator": {"big_file_ranged_get_1_byte_s": 0.5, "big_file_parts_per_restore": 128},
    }
    text = markdown(payload)
    assert "| small | restore onto an empty directory | aws s3 sync | 2.000 |" in text
    assert "1.00 / 3.00, 0.00" in text  # respot's snapshot / upload split, MiB sent
    assert "makes 128 such GETs" in text


def test_tool_versions_are_read_from_their_output() -> None:
    assert parse_aws_version("aws-cli/1.46.2 Python/3.11.7 Linux/6 botocore/1.43.62") == "1.46.2"
    assert parse_aws_version("command not found") is None
    assert parse_s5cmd_version("v2.3.0-991c9fb") == "2.3.0"
    assert parse_s5cmd_version(None) is None


def test_order_alternates_and_the_big_file_asks_for_room_in_proportion() -> None:
    tools = ("respot", "aws s3 sync", "s5cmd sync")
    assert tool_order(0, tools) == tools and tool_order(1, tools) == tools[::-1]
    two = room_needed(2 * data.GIB, tools)
    one = room_needed(data.GIB, tools)
    assert two["disk"] - data.GIB == 2 * (one["disk"] - data.GIB)
    assert two["memory"] > 2 * data.GIB


def test_cpu_seconds_of_a_process_are_read_from_proc() -> None:
    spent = process_cpu_seconds(os.getpid())
    assert spent > 0
    sum(range(2_000_000))  # burn a little CPU
    assert process_cpu_seconds(os.getpid()) >= spent


def test_requests_in_moto_log_are_named_by_s3_operation() -> None:
    key = "/bench-workspace/jobs/j/checkpoints/blobs/ab"
    assert operation("HEAD", key, "404") == "HeadObject:404"
    assert operation("GET", key, "200") == "GetObject"
    assert operation("GET", key, "206") == "GetObject"
    assert operation("GET", "/bench-workspace?list-type=2&prefix=x%2F", "200") == "ListObjects"
    assert operation("GET", "/bench-workspace/?list-type=2", "200") == "ListObjects"
    assert operation("PUT", key, "200") == "PutObject"
    assert operation("PUT", f"{key}?partNumber=3&uploadId=u", "200") == "UploadPart"
    assert operation("POST", f"{key}?uploads", "200") == "CreateMultipartUpload"
    assert operation("POST", f"{key}?uploadId=u", "200") == "CompleteMultipartUpload"
    assert operation("POST", "/bench-workspace?delete", "200") == "DeleteObjects"
    assert operation("DELETE", key, "204") == "DeleteObject"
    assert operation("PUT", "/bench-workspace", "200") == "CreateBucket"


def test_the_lifecycle_bench_saves_text_files_and_reports_its_three_measures() -> None:
    from bench.workspace import lifecycle

    files = lifecycle.saved_files(30, seed=1)
    assert len(files) == 30 and files == lifecycle.saved_files(30, seed=1)
    assert all(1024 <= len(text.encode()) <= 20 * 1024 for text in files.values())
    assert all(path.startswith("bench/s1/") for path in files)
    summary = {"n": 2, "median": 1.0, "p95": 2.0, "max": 2.0}
    text = lifecycle.markdown(
        {
            "time_scale": 1 / 30,
            "notice_real_seconds": 30.0,
            "terminate_real_seconds": 0.17,
            "notice_to_committed_s": summary,
            "notice_to_jupyter_answering_s": summary,
            "respot_share_s": summary,
            "with_modelled_ec2_boot_s": summary,
            "modelled_ec2_boot_s": 100.5,
            "idle_to_shutting_down_s": summary,
            "idle_to_terminated_s": summary,
            "files_lost": 0,
        }
    )
    assert "| notice -> workspace committed in S3 | 2 | 1.000 | 2.000 | 2.000 |" in text
    assert "| notice -> JupyterLab answering again | 2 | 1.000 | 2.000 | 2.000 |" in text
    assert "with EC2's modelled boot (100.5 s)" in text
    assert "idle stop -> instance shutting-down" in text and "lost: 0" in text
