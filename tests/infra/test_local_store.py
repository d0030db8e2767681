"""What the local runtime's store keeps across a restart (infra/local/persist.py); the whole
round trip through real processes is tests/e2e/test_local_restart_e2e.py."""

from __future__ import annotations

from pathlib import Path

from infra.local.persist import _belongs_to, object_path, saved_prefix, store_directory


def item(pk: str, sk: str, **attrs: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}, **{k: {"S": v} for k, v in attrs.items()}}


def test_live_jobs_their_instances_and_the_pollers_switch_are_left_out() -> None:
    live = {"job-live"}
    assert _belongs_to(item("JOB#job-live", "JOB"), live)
    assert _belongs_to(item("INSTANCE#i-1", "INSTANCE", job_id="job-live"), live)
    # the next runtime's pollers start as a new deployment's: its marker is not carried over
    assert _belongs_to(item("CONTROL#activity", "ACTIVITY"), live)
    # finished jobs, their instances, proofs and pool history are kept
    assert not _belongs_to(item("JOB#job-done", "JOB"), live)
    assert not _belongs_to(item("INSTANCE#i-2", "INSTANCE", job_id="job-done"), live)
    assert not _belongs_to(item("PROOF#ab", "PROOF"), live)
    assert not _belongs_to(item("POOL#g5.xlarge#us-east-1a", "POOL"), live)


def test_the_store_sits_next_to_the_state_file_and_an_empty_one_has_no_prefix(
    tmp_path: Path,
) -> None:
    store = store_directory(tmp_path / "local.json")
    assert store == tmp_path / "local-store"
    assert saved_prefix(store) is None
    store.mkdir()
    (store / "manifest.json").write_text('{"version": 999, "prefix": "respot-abc"}')
    assert saved_prefix(store) is None  # a store of another version is not read
    (store / "manifest.json").write_text('{"version": 1, "prefix": "respot-abc"}')
    assert saved_prefix(store) == "respot-abc"


def test_an_object_is_kept_inside_the_store_or_not_at_all(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    key = "jobs/job-1/outputs/model.pt"
    assert object_path(objects, key) == objects / key
    # a key a job or a researcher wrote may name any path: none leaves the store
    for key in (
        "/home/me/.bashrc",
        "jobs/../../x",  # hostile-path
        "../x",  # hostile-path
        "jobs//x",
        "jobs/job-1/",
        "",
    ):
        assert object_path(objects, key) is None, key
