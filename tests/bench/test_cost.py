"""The cost arithmetic on fixed request counts: units, prices, and the split per job-hour."""

from __future__ import annotations

import math

import pytest

from bench import prices
from bench.cost import Bill, bill_invocations, bill_requests, dynamodb_units, per_hour
from bench.proxy import Request
from infra.local.dispatcher import Invocation
from infra.local.runtime import HEARTBEAT_SECONDS


def req(service: str, operation: str, **detail: object) -> Request:
    return Request(service, operation, 200, 0.01, 0, 0, dict(detail))


def test_dynamodb_units_follow_item_size_and_the_live_index() -> None:
    # A 2.5 KB live job updated in place: 3 WRU + 2 for the `live` index moving the item.
    assert dynamodb_units(
        req("dynamodb", "PutItem", item_bytes=2500, live=True, conditional_update=True, pk="JOB#a")
    ) == (5.0, 0.0)
    # Created: one index write. Ended (no `live` any more): one index delete.
    assert dynamodb_units(req("dynamodb", "PutItem", item_bytes=100, live=True)) == (2.0, 0.0)
    assert dynamodb_units(
        req("dynamodb", "PutItem", item_bytes=100, conditional_update=True, pk="JOB#a")
    ) == (2.0, 0.0)
    # Reads: 1 unit per 4 KB strongly consistent, half that eventually consistent.
    assert dynamodb_units(req("dynamodb", "GetItem", item_bytes=5000, consistent=True)) == (0, 2)
    assert dynamodb_units(req("dynamodb", "Query", item_bytes=100)) == (0.0, 0.5)


def test_a_fixed_set_of_requests_is_priced_at_list_prices() -> None:
    # GIVEN 10 agent messages, 1 publish, 4 S3 puts, 3 S3 gets, one free delete, and the
    # dispatcher's own polling (which the event source mapping replaces)
    requests = [req("sqs", "SendMessage", message_bytes=70_000)] + [
        req("sqs", "SendMessage", message_bytes=500) for _ in range(9)
    ]
    requests += [req("sns", "Publish")]
    requests += [req("s3", "PutObject") for _ in range(4)]
    requests += [req("s3", op) for op in ("GetObject", "HeadObject", "HeadObject")]
    requests += [req("s3", "DeleteObjects"), req("sqs", "ReceiveMessage")]
    invocations = [(Invocation("agent_events", 0.0, 0.0404, 1, True), 150) for _ in range(10)]
    # WHEN they are billed
    bill = bill_requests(requests, dispatcher_side=True) + bill_invocations(invocations)
    # THEN each line is what the price list says
    assert bill.sqs_requests == 2 + 9 + 10 * 2  # a 70 KB body is two 64 KB chunks
    assert (bill.s3_put_class, bill.s3_get_class, bill.sns_publishes) == (4, 3, 1)
    assert bill.lambda_requests == 10
    assert bill.lambda_gb_seconds == pytest.approx(10 * 0.041 * 0.25)  # 256 MB, ms rounded up
    assert bill.log_bytes == 10 * (150 + 350)
    usd = bill.dollars()
    assert usd["sqs"] == pytest.approx(31 * 0.40 / 1e6)
    assert usd["s3"] == pytest.approx(4 * 0.005 / 1000 + 3 * 0.0004 / 1000)
    assert usd["lambda"] == pytest.approx(10 * 0.20 / 1e6 + 0.1025 * 0.0000166667)
    assert usd["logs"] == pytest.approx(5000 / 1e9 * 0.50)
    assert usd["total"] == pytest.approx(sum(v for k, v in usd.items() if k != "total"))


def test_a_job_hour_counts_real_intervals_not_the_compressed_run() -> None:
    # GIVEN unit costs of one heartbeat, one tick and one checkpoint
    hb, tick, ckpt = Bill(sqs_requests=3), Bill(lambda_requests=1), Bill(s3_put_class=10)
    # WHEN an hour is priced with a checkpoint every ten minutes
    hour, parts = per_hour(hb, tick, ckpt, checkpoints_per_hour=6)
    # THEN it holds 60 heartbeats (the agent's every 60 s), 60 ticks (every 60 s), 6 checkpoints
    beats = 3600 / HEARTBEAT_SECONDS
    assert beats == 60
    assert hour.sqs_requests == 3 * beats and hour.lambda_requests == 60
    assert hour.s3_put_class == 60
    assert parts["heartbeats"] == pytest.approx(prices.usd("sqs_request", 3 * beats))
    assert math.isclose(sum(parts.values()), hour.dollars()["total"])


def test_a_decrypted_secure_string_read_is_one_kms_request() -> None:
    from bench.proxy import classify

    headers = {
        "authorization": "AWS4-HMAC-SHA256 Credential=k/20261123/us-east-1/ssm/aws4_request, x",
        "x-amz-target": "AmazonSSM.GetParameter",
    }
    secure = b'{"Parameter": {"Type": "SecureString", "Value": "xoxb-1"}}'
    plain = b'{"Parameter": {"Type": "String", "Value": "{}"}}'
    asked = b'{"Name": "/respot/slack-token", "WithDecryption": true}'
    reads = [
        Request(*classify("POST", "/", headers, asked, secure)[:2], 200, 0.0, 0, 0, detail)
        for detail in (
            classify("POST", "/", headers, asked, secure)[2],  # the Slack token: KMS Decrypt
            classify("POST", "/", headers, b'{"Name": "/respot/deployment"}', plain)[2],
            classify("POST", "/", headers, asked, plain)[2],  # a String: nothing to decrypt
        )
    ]
    assert [r.detail["kms_decrypt"] for r in reads] == [True, False, False]
    bill = bill_requests(reads, dispatcher_side=True)
    assert bill.kms_requests == 1
    assert bill.dollars()["kms"] == pytest.approx(0.03 / 10_000)
