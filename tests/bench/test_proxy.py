"""The counting proxy counts a known sequence of AWS calls exactly, by service and operation."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from bench.proxy import CountingProxy
from infra.local import cloud


@pytest.fixture
def proxy(moto_endpoint: str) -> Iterator[CountingProxy]:
    counting = CountingProxy(moto_endpoint).start()
    yield counting
    counting.stop()


def test_every_request_is_counted_once_with_its_operation(proxy: CountingProxy) -> None:
    # GIVEN clients of four services pointed at the proxy, and random resource names
    name = f"p-{secrets.token_hex(4)}"
    ddb, sqs, s3, sns = (cloud.client(s, proxy.url) for s in ("dynamodb", "sqs", "s3", "sns"))
    ec2 = cloud.client("ec2", proxy.url)
    # WHEN a known sequence of calls goes through it
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName=name, Item={"pk": {"S": "JOB#a"}, "doc": {"S": "x" * 3000}})
    ddb.get_item(TableName=name, Key={"pk": {"S": "JOB#a"}}, ConsistentRead=True)
    ddb.get_item(TableName=name, Key={"pk": {"S": "JOB#a"}}, ConsistentRead=True)
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    body = {"job_id": "a", "body": {"kind": "progress"}}
    sqs.send_message(QueueUrl=url, MessageBody=json.dumps(body))
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="jobs/a/checkpoints/blobs/1", Body=b"12345")
    s3.head_object(Bucket=name, Key="jobs/a/checkpoints/blobs/1")
    s3.get_object(Bucket=name, Key="jobs/a/checkpoints/blobs/1")["Body"].read()
    s3.list_objects_v2(Bucket=name, Prefix="jobs/a/checkpoints/")
    s3.delete_objects(Bucket=name, Delete={"Objects": [{"Key": "jobs/a/checkpoints/blobs/1"}]})
    topic = sns.create_topic(Name=name)["TopicArn"]
    sns.publish(TopicArn=topic, Message="hello")
    ec2.describe_instances()
    # THEN each call was counted once, under the right service and operation
    assert proxy.counts() == {
        ("dynamodb", "CreateTable"): 1,
        ("dynamodb", "PutItem"): 1,
        ("dynamodb", "GetItem"): 2,
        ("sqs", "CreateQueue"): 1,
        ("sqs", "SendMessage"): 1,
        ("s3", "CreateBucket"): 1,
        ("s3", "PutObject"): 1,
        ("s3", "HeadObject"): 1,
        ("s3", "GetObject"): 1,
        ("s3", "ListObjectsV2"): 1,
        ("s3", "DeleteObjects"): 1,
        ("sns", "CreateTopic"): 1,
        ("sns", "Publish"): 1,
        ("ec2", "DescribeInstances"): 1,
    }
    # AND the details the pricing needs are kept: item sizes, message kinds, S3 prefixes
    requests = proxy.snapshot()
    put = next(r for r in requests if r.operation == "PutItem")
    assert put.detail["pk"] == "JOB#a" and 3000 < put.detail["item_bytes"] < 3020
    gets = [r for r in requests if r.operation == "GetItem"]
    assert all(r.detail["consistent"] and r.detail["item_bytes"] > 3000 for r in gets)
    send = next(r for r in requests if r.operation == "SendMessage")
    assert send.detail["kind"] == "progress"
    listing = next(r for r in requests if r.operation == "ListObjectsV2")
    assert listing.detail["prefix"] == "jobs/a/checkpoints/"
    assert all(r.status < 300 for r in requests)
