"""CheckpointStore against a real moto server: upload, dedupe, restore, fallback, prune."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ReadTimeoutError

from respot.exceptions import CheckpointError
from respot.storage import layout
from respot.storage.checkpoints import CheckpointStore

JOB = "ckpt-job"


def write(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def read_all(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def keys(s3: Any, bucket: str, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@pytest.fixture
def store(s3: Any, bucket: str) -> CheckpointStore:
    return CheckpointStore(bucket=bucket, job_id=JOB, client=s3)


def test_upload_then_restore_round_trips_every_file(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a checkpoint directory with nested files, one of them empty
    files = {"model.pt": os.urandom(3000), "opt/adam.bin": b"x" * 100, "empty": b""}
    src = write(tmp_path / "src", files)
    # WHEN it is uploaded as step 7 of attempt 2, then restored elsewhere
    result = store.upload(src, step=7, attempt=2, reason="periodic")
    restored = store.restore(tmp_path / "dest")
    # THEN the manifest names every file with size and sha256, and the files come back equal
    assert result.manifest_key == layout.manifest_key(JOB, 7, 2)
    assert result.size_bytes == result.uploaded_bytes == 3100
    body = json.loads(s3.get_object(Bucket=bucket, Key=result.manifest_key)["Body"].read())
    assert body["step"] == 7 and body["attempt"] == 2 and body["reason"] == "periodic"
    assert body["created_at"]
    assert {f["path"]: (f["size"], f["sha256"]) for f in body["files"]} == {
        rel: (len(data), hashlib.sha256(data).hexdigest()) for rel, data in files.items()
    }
    assert restored is not None and restored.step == 7 and restored.key == result.manifest_key
    assert read_all(tmp_path / "dest") == files
    blob_keys = keys(s3, bucket, layout.blob_key(JOB, ""))
    assert blob_keys == sorted(
        layout.blob_key(JOB, hashlib.sha256(d).hexdigest()) for d in files.values()
    )


def test_unchanged_files_are_not_sent_again_even_by_a_fresh_process(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    src = write(tmp_path / "src", {"big.bin": os.urandom(50_000), "small.json": b"{}"})
    first = store.upload(src, step=1, attempt=1, reason="periodic")
    # WHEN the same files are uploaded again by this store...
    again = store.upload(src, step=2, attempt=1, reason="periodic")
    # ...and by a new store (a new process that only knows S3, via HeadObject)
    fresh = CheckpointStore(bucket=bucket, job_id=JOB, client=s3)
    third = fresh.upload(src, step=3, attempt=2, reason="periodic")
    # ...and after one small file changed
    (src / "small.json").write_bytes(b'{"a": 1}')
    fourth = fresh.upload(src, step=4, attempt=2, reason="periodic")
    # THEN only new content is sent
    assert first.uploaded_bytes == 50_002
    assert again.uploaded_bytes == 0 and again.size_bytes == 50_002
    assert third.uploaded_bytes == 0
    assert fourth.uploaded_bytes == 8 and fourth.size_bytes == 50_008


def test_checkpoint_without_manifest_never_counts(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    # GIVEN a complete step 10 and a step 20 whose blobs are in S3 but whose manifest is not
    write(tmp_path / "a", {"state": b"step 10"})
    store.upload(tmp_path / "a", step=10, attempt=1, reason="periodic")
    write(tmp_path / "b", {"state": b"step 20"})
    partial = store.upload(tmp_path / "b", step=20, attempt=1, reason="periodic")
    s3.delete_object(Bucket=bucket, Key=partial.manifest_key)
    assert layout.blob_key(JOB, hashlib.sha256(b"step 20").hexdigest()) in keys(
        s3, bucket, layout.checkpoints_prefix(JOB)
    )
    # WHEN the newest checkpoint is looked up and restored
    latest = store.latest()
    restored = CheckpointStore(bucket=bucket, job_id=JOB, client=s3).restore(tmp_path / "dest")
    # THEN step 10 is the newest complete checkpoint
    assert latest is not None and latest.step == 10
    assert restored is not None and restored.step == 10
    assert read_all(tmp_path / "dest") == {"state": b"step 10"}


@pytest.mark.parametrize("damage", ["corrupt", "missing", "truncated"])
def test_a_bad_blob_in_the_newest_checkpoint_falls_back_to_the_previous_one(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path, damage: str
) -> None:
    write(tmp_path / "a", {"state": b"old state", "shared": b"same in both"})
    store.upload(tmp_path / "a", step=1, attempt=1, reason="periodic")
    write(tmp_path / "b", {"state": b"new state!", "shared": b"same in both"})
    store.upload(tmp_path / "b", step=2, attempt=1, reason="periodic")
    key = layout.blob_key(JOB, hashlib.sha256(b"new state!").hexdigest())
    if damage == "corrupt":
        s3.put_object(Bucket=bucket, Key=key, Body=b"NEW STATE!")  # same size, other bytes
    elif damage == "missing":
        s3.delete_object(Bucket=bucket, Key=key)
    else:
        s3.put_object(Bucket=bucket, Key=key, Body=b"new")
    # GIVEN a destination that already has files (from an earlier attempt)
    write(tmp_path / "dest", {"stale": b"stale"})
    restored = CheckpointStore(bucket=bucket, job_id=JOB, client=s3).restore(tmp_path / "dest")
    assert restored is not None and restored.step == 1
    assert read_all(tmp_path / "dest") == {"state": b"old state", "shared": b"same in both"}
    # No temporary directories are left next to the destination.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "dest"]


def test_when_every_checkpoint_is_bad_restore_raises_and_leaves_dest_alone(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    write(tmp_path / "a", {"state": b"only"})
    store.upload(tmp_path / "a", step=1, attempt=1, reason="periodic")
    s3.delete_object(Bucket=bucket, Key=layout.blob_key(JOB, hashlib.sha256(b"only").hexdigest()))
    write(tmp_path / "dest", {"keep": b"me"})
    with pytest.raises(CheckpointError, match="none could be restored"):
        store.restore(tmp_path / "dest")
    assert read_all(tmp_path / "dest") == {"keep": b"me"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "dest"]


def test_no_checkpoint_restores_nothing(store: CheckpointStore, tmp_path: Path) -> None:
    assert store.latest() is None
    assert store.restore(tmp_path / "dest") is None
    assert not (tmp_path / "dest").exists()


def test_a_manifest_naming_a_path_outside_the_checkpoint_is_never_restored(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    write(tmp_path / "a", {"state": b"good"})
    store.upload(tmp_path / "a", step=1, attempt=1, reason="periodic")
    evil = store.upload(tmp_path / "a", step=2, attempt=1, reason="periodic")
    body = json.loads(s3.get_object(Bucket=bucket, Key=evil.manifest_key)["Body"].read())
    body["files"][0]["path"] = "../../escaped"  # hostile-path
    s3.put_object(Bucket=bucket, Key=evil.manifest_key, Body=json.dumps(body).encode())
    restored = store.restore(tmp_path / "work" / "dest")
    assert restored is not None and restored.step == 1
    assert not (tmp_path / "escaped").exists()


def test_prune_keeps_the_newest_n_and_only_their_blobs(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    for step in range(1, 6):
        write(tmp_path / f"s{step}", {"shared": b"constant", "state": f"step {step}".encode()})
        store.upload(tmp_path / f"s{step}", step=step * 10, attempt=1, reason="periodic")
    result = store.prune(keep=2)
    assert result.manifests_deleted == 3 and result.blobs_deleted == 3
    assert store.manifest_keys() == [
        layout.manifest_key(JOB, 40, 1),
        layout.manifest_key(JOB, 50, 1),
    ]
    expected = {hashlib.sha256(d).hexdigest() for d in (b"constant", b"step 4", b"step 5")}
    assert set(keys(s3, bucket, layout.blob_key(JOB, ""))) == {
        layout.blob_key(JOB, d) for d in expected
    }
    # The kept checkpoints still restore, and a pruned blob is sent again when needed.
    assert store.restore(tmp_path / "dest") is not None
    assert read_all(tmp_path / "dest")["state"] == b"step 5"
    again = store.upload(tmp_path / "s1", step=60, attempt=1, reason="periodic")
    assert again.uploaded_bytes == len(b"step 1")


def test_big_files_go_up_and_down_in_parts(s3: Any, bucket: str, tmp_path: Path) -> None:
    # 5 MiB is S3's smallest part: a 12 MiB file with that threshold is three parts.
    config = TransferConfig(
        multipart_threshold=5 * 1024**2, multipart_chunksize=5 * 1024**2, max_concurrency=4
    )
    store = CheckpointStore(bucket=bucket, job_id=JOB, client=s3, transfer_config=config)
    data = os.urandom(12 * 1024**2)
    write(tmp_path / "src", {"big.bin": data})
    store.upload(tmp_path / "src", step=1, attempt=1, reason="periodic")
    head = s3.head_object(Bucket=bucket, Key=layout.blob_key(JOB, hashlib.sha256(data).hexdigest()))
    assert head["ETag"].strip('"').endswith("-3")  # a multipart upload's ETag counts its parts
    assert store.restore(tmp_path / "dest") is not None
    assert (tmp_path / "dest" / "big.bin").read_bytes() == data


def test_restore_says_which_checkpoints_it_refused_and_why(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    # Issue 24, item 11: the refusal was only a log line; the agent now reports it.
    write(tmp_path / "a", {"state": b"old state"})
    store.upload(tmp_path / "a", step=1, attempt=1, reason="periodic")
    write(tmp_path / "b", {"state": b"new state!"})
    store.upload(tmp_path / "b", step=2, attempt=1, reason="periodic")
    write(tmp_path / "c", {"state": b"newest state"})
    store.upload(tmp_path / "c", step=3, attempt=2, reason="periodic")
    for data in (b"new state!", b"newest state"):
        key = layout.blob_key(JOB, hashlib.sha256(data).hexdigest())
        s3.put_object(Bucket=bucket, Key=key, Body=data.upper())  # same size, other bytes
    fresh = CheckpointStore(bucket=bucket, job_id=JOB, client=s3)
    restored = fresh.restore(tmp_path / "dest")
    assert restored is not None and restored.step == 1
    assert [(r.step, r.manifest_key) for r in fresh.refused] == [
        (3, layout.manifest_key(JOB, 3, 2)),
        (2, layout.manifest_key(JOB, 2, 1)),
    ]
    assert all("SHA-256" in r.reason and "the manifest says" in r.reason for r in fresh.refused)
    # AND a clean restore refuses nothing
    assert CheckpointStore(bucket=bucket, job_id=JOB, client=s3).refused == []


def test_a_small_file_is_restored_by_one_get_and_no_head(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    # Issue 27's workspace benchmark: a HeadObject before each GET made a restore of 1,000
    # small files 2,000 requests where `aws s3 sync` makes 1,000 (the manifest has the size).
    files = {f"nb/{i}.ipynb": f"cell {i}".encode() for i in range(5)}
    store.upload(write(tmp_path / "src", files), step=1, attempt=1, reason="periodic")
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    s3.meta.events.register("before-call.s3", count)
    restored = CheckpointStore(bucket=bucket, job_id=JOB, client=s3).restore(tmp_path / "dest")
    assert restored is not None and read_all(tmp_path / "dest") == files
    assert sorted(calls) == ["GetObject"] * 6 + ["ListObjectsV2"]  # the manifest, five blobs


class _BreaksFirstBlobStream:
    """An S3 client whose first blob GET answers with a stream that breaks half-way."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.broken = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_object(self, **kwargs: Any) -> Any:
        response = self._client.get_object(**kwargs)
        if "/blobs/" in kwargs["Key"] and not self.broken:
            self.broken += 1
            body = response["Body"]

            class Broken:
                def iter_chunks(self, size: int) -> Any:
                    yield body.read(2)
                    raise ReadTimeoutError(endpoint_url="moto")

            response["Body"] = Broken()
        return response


def test_a_small_file_whose_stream_breaks_is_read_again(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    store.upload(write(tmp_path / "src", {"state": b"step 7 state"}), step=7, attempt=1, reason="x")
    flaky = _BreaksFirstBlobStream(s3)
    restored = CheckpointStore(bucket=bucket, job_id=JOB, client=flaky).restore(tmp_path / "dest")
    assert flaky.broken == 1
    assert restored is not None and restored.step == 7
    assert read_all(tmp_path / "dest") == {"state": b"step 7 state"}


def _counting(s3: Any) -> list[str]:
    calls: list[str] = []

    def count(model: Any, **_: Any) -> None:
        calls.append(model.name)

    s3.meta.events.register("before-call.s3", count)
    return calls


def test_many_unknown_blobs_are_checked_by_one_listing_and_a_deleted_one_is_sent_again(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    # 100 files stored by one process; one of their blobs then disappears from S3.
    old = {f"src/{i:03d}.py": f"print({i})".encode() for i in range(100)}
    store.upload(write(tmp_path / "ws", old), step=1, attempt=1, reason="periodic")
    gone = hashlib.sha256(b"print(7)").hexdigest()
    s3.delete_object(Bucket=bucket, Key=layout.blob_key(JOB, gone))
    new = {f"nb/{i:03d}.ipynb": f"cell {i}".encode() for i in range(50)}
    write(tmp_path / "ws", new)
    # A fresh process (a new instance) knows none of the 150: it lists instead of 150 HEADs.
    calls = _counting(s3)
    fresh = CheckpointStore(bucket=bucket, job_id=JOB, client=s3)
    result = fresh.upload(tmp_path / "ws", step=2, attempt=2, reason="periodic")
    assert "HeadObject" not in calls and calls.count("ListObjectsV2") == 1
    assert result.uploaded_bytes == sum(len(b) for b in new.values()) + len(b"print(7)")
    assert fresh.restore(tmp_path / "dest") is not None
    assert read_all(tmp_path / "dest") == {**old, **new}


class _OneKeyPages:
    """An S3 client whose listings come one key a page."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_paginator(self, name: str) -> Any:
        real = self._client.get_paginator(name)

        class OneKey:
            def paginate(self, **kwargs: Any) -> Any:
                return real.paginate(**kwargs, PaginationConfig={"PageSize": 1})

        return OneKey()


def test_a_listing_longer_than_the_heads_it_saves_gives_way_to_heads(
    store: CheckpointStore, s3: Any, bucket: str, tmp_path: Path
) -> None:
    stored = {f"a/{i:02d}": f"kept {i}".encode() for i in range(20)}
    store.upload(write(tmp_path / "a", stored), step=1, attempt=1, reason="periodic")
    fresh_files = {f"b/{i:03d}": f"new {i}".encode() for i in range(90)}
    write(tmp_path / "a", fresh_files)
    calls = _counting(s3)
    # 110 unknown: at most 11 pages are worth it; 20 blobs at one a page are more.
    fresh = CheckpointStore(bucket=bucket, job_id=JOB, client=_OneKeyPages(s3))
    result = fresh.upload(tmp_path / "a", step=2, attempt=2, reason="periodic")
    assert calls.count("HeadObject") == 110
    assert result.uploaded_bytes == sum(len(b) for b in fresh_files.values())
