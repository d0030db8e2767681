"""A job naming data its instances may not read is refused before anything is spent: the rule
(`respot.spec.reach`, the instance role's S3 grants: the stack's data_bucket_arns and the deployment
bucket's jobs/) and `run()`/`sweep()` applying it before any upload. The commands function's
side: tests/handlers/test_reach_handler.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from respot.client.deployment import Deployment
from respot.client.handle import run
from respot.exceptions import SpecError
from respot.spec.reach import data_grant, readable, refused_reads, unreachable
from respot.spec.training import TrainingEnvVar
from tests.sdk.test_allowed_types import NoAws

PARAMETER = (
    '{"topic_arn": "arn:aws:sns:us-east-1:123456789012:t", "table_name": "t", "bucket": '
    '"respot-jobs", "region": "us-east-1", "data_buckets": '
    '"arn:aws:s3:::datasets,arn:aws:s3:::shared/imagenet,plain-name"}'
)
DEPLOYMENT = Deployment.from_json(PARAMETER)


def spec(*uris: str, **fields: object) -> TrainingEnvVar:
    data = [{"s3_uri": uri, "local_path": f"d{i}"} for i, uri in enumerate(uris)]
    return TrainingEnvVar(name="x", entry_point="a.b:C", data=data, **fields)  # type: ignore[arg-type]


def refused(*uris: str, grants: tuple[str, ...], bucket: str | None = "respot-jobs") -> list[str]:
    return refused_reads(spec(*uris), region=None, account=None, data_buckets=grants, bucket=bucket)


def test_the_deployment_parameter_says_what_instances_read_data_from() -> None:
    assert DEPLOYMENT.data_buckets == (
        "arn:aws:s3:::datasets",
        "arn:aws:s3:::shared/imagenet",
        "plain-name",
    )
    # An empty list is a list (nothing granted, checked); no key (older stack) is "not said"
    without = PARAMETER.split(', "data', maxsplit=1)[0]
    older = Deployment.from_json(without + "}")
    assert older.data_buckets is None
    empty = Deployment.from_json(without + ', "data_buckets": ""}')
    assert empty.data_buckets == ()
    assert Deployment.from_json(DEPLOYMENT.to_json()) == DEPLOYMENT


@pytest.mark.parametrize(
    "uri",
    [
        "s3://datasets",  # the whole bucket
        "s3://datasets/",
        "s3://datasets/mnist/train.csv",
        "s3://plain-name/x/",
        "s3://shared/imagenet/",  # the granted prefix itself
        "s3://shared/imagenet/train/",
        "s3://shared/imagenet/train/part-0.tar",
        "s3://respot-jobs/jobs/job-1/outputs/",  # an earlier job's outputs
    ],
)
def test_data_under_a_grant_is_readable(uri: str) -> None:
    assert unreachable(spec(uri), DEPLOYMENT) == []


@pytest.mark.parametrize(
    ("uri", "said"),
    [
        (
            "s3://datasets-other/x",  # a longer name is another bucket
            "data[0].s3_uri: s3://datasets-other/x is in bucket datasets-other, which respot's "
            "instances may not read: add arn:aws:s3:::datasets-other to the stack's "
            "data_bucket_arns (now: arn:aws:s3:::datasets, arn:aws:s3:::shared/imagenet, "
            "plain-name; docs/deploy.md) and redeploy, or copy the data to a granted bucket",
        ),
        ("s3://dataset/x", "data[0].s3_uri: s3://dataset/x is in bucket dataset, "),
        ("s3://plain-name-2/", "data[0].s3_uri: s3://plain-name-2/ is in bucket plain-name-2, "),
        (
            "s3://shared/imagenet-21k/",  # beside the prefix, not under it
            "data[0].s3_uri: s3://shared/imagenet-21k/ is outside the prefixes respot's "
            "instances may read in bucket shared (s3://shared/imagenet/): name a URI under one "
            "of them (a prefix ends in /), or add arn:aws:s3:::shared to the stack's "
            "data_bucket_arns",
        ),
        ("s3://shared/imagenet", "data[0].s3_uri: s3://shared/imagenet is outside the prefixes"),
        ("s3://shared", "data[0].s3_uri: s3://shared is outside the prefixes"),
        ("s3://shared/other/imagenet/", "data[0].s3_uri: s3://shared/other/imagenet/ is outside"),
        # the deployment bucket: only jobs/ (the instance role reads nothing else there)
        ("s3://respot-jobs/wheelhouse/", "data[0].s3_uri: s3://respot-jobs/wheelhouse/ is outside"),
        ("s3://respot-jobs/jobsx/", "data[0].s3_uri: s3://respot-jobs/jobsx/ is outside"),
    ],
)
def test_data_outside_the_grants_is_refused_naming_the_field_bucket_and_fix(
    uri: str, said: str
) -> None:
    (problem,) = unreachable(spec(uri), DEPLOYMENT)
    assert problem.startswith(said), problem
    assert problem.endswith("and redeploy, or copy the data to a granted bucket")


def test_each_refused_source_is_named_by_its_index() -> None:
    problems = unreachable(spec("s3://datasets/a", "s3://other/b", "s3://third/c/"), DEPLOYMENT)
    assert [p.split(":", 1)[0] for p in problems] == ["data[1].s3_uri", "data[2].s3_uri"]


def test_a_stack_granting_nothing_refuses_every_bucket_but_its_own_jobs() -> None:
    assert refused("s3://respot-jobs/jobs/a/outputs/", grants=()) == []
    (problem,) = refused("s3://datasets/x", grants=())
    assert "(now: none; docs/deploy.md)" in problem


def test_any_bucket_and_wildcards_read_as_iam_reads_them() -> None:
    # arn:aws:s3:::* grants every bucket: nothing is refused
    assert refused("s3://a-bucket/x", "s3://bbb", grants=("arn:aws:s3:::*",), bucket=None) == []
    # team-* buckets, not the others; ? is one character
    assert refused("s3://team-a/x", grants=("arn:aws:s3:::team-*",)) == []
    assert refused("s3://teams/x", grants=("arn:aws:s3:::team-*",)) != []
    assert refused("s3://data1/x", grants=("arn:aws:s3:::data?",)) == []
    assert refused("s3://data12/x", grants=("arn:aws:s3:::data?",)) != []
    # a dot is a dot, not "any character"
    assert refused("s3://myxbucket/x", grants=("my.bucket",)) != []
    # a wildcard in the prefix
    assert refused("s3://bkt1/runs/7/ckpt/", grants=("arn:aws:s3:::bkt1/runs/*/ckpt",)) == []


def test_grant_entries_are_read_as_the_stack_grants_them() -> None:
    assert data_grant("datasets") == ("datasets", None)
    assert data_grant("arn:aws:s3:::datasets") == ("datasets", None)
    assert data_grant("arn:aws-cn:s3:::datasets/a/b/") == ("datasets", "a/b")
    assert readable("datasets", "a/b/c", [("datasets", "a/b")])
    assert not readable("datasets", "a/bc", [("datasets", "a/b")])


def test_a_deployment_that_does_not_say_is_not_checked() -> None:
    older = Deployment(topic_arn="arn:aws:sns:us-east-1:123456789012:t", table_name="t", bucket="b")
    assert unreachable(spec("s3://anything/x"), older) == []
    assert refused_reads(spec("s3://anything/x"), region=None, account=None) == []


def test_a_malformed_data_uri_never_reaches_the_rule() -> None:
    with pytest.raises(SpecError) as exc:
        run(
            {"name": "x", "entry_point": "a.b:C", "data": [{"s3_uri": "s3:/x", "local_path": "d"}]},
            deployment=DEPLOYMENT,
            session=NoAws(),
        )
    assert "data" in str(exc.value) and "is not an S3 URI" in str(exc.value)


def test_run_refuses_ungranted_data_before_uploading_the_code(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "__init__.py").write_text("")
    (tmp_path / "a" / "b.py").write_text("class C:\n    pass\n")
    job = spec("s3://datasets/ok/", "s3://elsewhere/x/", source_dir=str(tmp_path))
    # NoAws fails the test if any client (S3 upload, SNS publish) is made
    with pytest.raises(SpecError) as exc:
        run(job, deployment=DEPLOYMENT, session=NoAws())
    (problem,) = exc.value.problems
    assert problem.startswith("data[1].s3_uri: s3://elsewhere/x/ is in bucket elsewhere"), problem


def test_sweep_refuses_a_job_with_ungranted_data() -> None:
    from respot.sweep.client import sweep
    from tests.sweep.conftest import sweep_spec

    job = {"entry_point": "m:S", "data": [{"s3_uri": "s3://elsewhere/x/", "local_path": "d"}]}
    with pytest.raises(SpecError) as exc:
        sweep(sweep_spec(job=job), deployment=DEPLOYMENT, session=NoAws())
    (problem,) = exc.value.problems
    assert problem.startswith("job.data[0].s3_uri: s3://elsewhere/x/ is in bucket elsewhere")
