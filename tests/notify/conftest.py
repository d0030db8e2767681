"""A job table and the Slack token parameter on the moto server, the local Slack, and notifiers."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from infra.local import cloud
from infra.local.slack import LocalSlack, SlackMessage, SlackThread
from respot.aws.jobs import JobTable
from respot.core.job import JobRecord
from respot.notify import Delivery, SlackNotifier, SlackTokenSource
from tests.notify.story import Story

CHANNEL = "#ml-training"


class Bench:
    """What the notify Lambda talks to, with the control plane's writes played by `commit`."""

    def __init__(self, endpoint: str, slack: LocalSlack) -> None:
        self.local = cloud.provision(endpoint, prefix=f"n{secrets.token_hex(4)}")
        self.jobs = JobTable(self.local.table_name, self.local.client("dynamodb"))
        self.ssm = self.local.client("ssm")
        self.slack = slack
        self.channel_id = slack.add_channel(CHANNEL)
        self.put_token(slack.token)

    def put_token(self, token: str | None) -> None:
        """What the platform team does (docs/slack.md); None deletes the parameter."""
        name = self.local.slack_token_parameter
        if token is None:
            self.ssm.delete_parameter(Name=name)
            return
        self.ssm.put_parameter(Name=name, Type="SecureString", Value=token, Overwrite=True)

    def notifier(self, **kwargs: Any) -> SlackNotifier:
        tokens = kwargs.pop(
            "tokens", SlackTokenSource(self.local.slack_token_parameter, self.ssm, ttl_seconds=300)
        )
        return SlackNotifier(
            jobs=kwargs.pop("jobs", self.jobs),
            tokens=tokens,
            default_channel=kwargs.pop("default_channel", CHANNEL),
            base_url=self.slack.base_url,
            **kwargs,
        )

    def commit(self, record: JobRecord) -> JobRecord:
        """Write `record` as the control plane would: on the stored version, keeping `notify`."""
        stored = self.jobs.get(record.job_id)
        keep = stored.notify if stored else {}
        return self.jobs.save(
            record.model_copy(update={"notify": keep}),
            expected_version=stored.version if stored else None,
        )

    def play(self, story: Story, notifier: SlackNotifier) -> list[Delivery]:
        """Commit every record of the story and deliver each notification right after it."""
        done = []
        for record, note in story.commits:
            self.commit(record)
            if note is not None:
                done.append(notifier.deliver(note))
        return done

    def thread(self, job_id: str) -> SlackThread:
        record = self.jobs.get(job_id)
        assert record is not None
        where = record.notify["slack"]
        return self.slack.thread(where["channel"], where["ts"])

    def top_level_of(self, job_id: str, channel: str = CHANNEL) -> list[SlackMessage]:
        return [m for m in self.slack.workspace.top_level(channel) if job_id in m.text]


def kinds(messages: list[SlackMessage]) -> list[str]:
    """The news kind of each reply, from its Slack message metadata."""
    return [str((m.metadata or {})["event_payload"]["kind"]) for m in messages]


def job_id() -> str:
    return f"job-{secrets.token_hex(4)}"


@pytest.fixture(scope="module")
def slack() -> Iterator[LocalSlack]:
    with LocalSlack() as server:
        yield server


@pytest.fixture(scope="module")
def bench(moto_endpoint: str, slack: LocalSlack) -> Bench:
    return Bench(moto_endpoint, slack)


@pytest.fixture(autouse=True)
def _slack_up(slack: LocalSlack) -> Iterator[None]:
    """Every test starts and ends with Slack serving normally."""
    yield
    slack.recover()
    slack.start()
