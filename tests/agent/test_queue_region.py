"""An agent in a satellite region sends to the home queue through the queue's own region."""

from __future__ import annotations

from respot.agent.runner import queue_region_of


def test_the_queue_region_comes_from_its_url() -> None:
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/Respot-AgentEvents"
    assert queue_region_of(url) == "us-east-1"
    assert queue_region_of("https://sqs.cn-north-1.amazonaws.com.cn/1/q") == "cn-north-1"
    # the emulator's URLs (an endpoint is configured then) and anything else: no region
    assert queue_region_of("http://127.0.0.1:5000/123456789012/q") is None
    assert queue_region_of("https://evil.example/sqs.us-east-1.amazonaws.com/") is None
