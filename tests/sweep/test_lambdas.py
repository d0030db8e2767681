"""The sweep's Lambdas on the moto server: a sweep command recorded once and kicked, trial jobs
submitted through the control plane, their news fed back on the FIFO queue, bad input refused."""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import lambdas._runtime as runtime
import lambdas.sweep as sweep_lambda
from infra.local import cloud
from infra.local.dispatcher import LambdaContext
from lambdas import agent_events, commands
from respot.control.config import ControlPlaneConfig
from respot.control.service import ControlPlane
from respot.spec.training import TrainingEnvVar
from respot.storage import layout
from respot.sweep.model import SweepStopCommand, SweepSubmission
from respot.wire.messages import AgentMessage, AgentProgress, CodeArtifact, JobSubmission, TrialRef
from tests.conftest import aws_event
from tests.sweep.conftest import submission

CONTEXT = LambdaContext("test", 256, 60)


class Env:
    def __init__(self, endpoint: str) -> None:
        self.local = cloud.provision(endpoint, prefix=f"t{secrets.token_hex(4)}")
        self.clients = {n: self.local.client(n) for n in ("dynamodb", "ec2", "s3", "sqs")}
        config = ControlPlaneConfig.from_env(self.local.function_env("sweep"))
        self.control = ControlPlane.from_config(
            config, session=cloud.session(), clients=self.clients
        )
        self.dead: list[tuple[str, str]] = []
        runtime.install(
            lambda: self.control, lambda body, reason, source: self.dead.append((source, reason))
        )
        sweep_lambda.install(lambda: None)
        self.sweep_queue = self.local.queue_urls["sweep-events"]

    def sqs_event(self, *bodies: str, fifo: bool = False) -> dict[str, Any]:
        sample = aws_event("lambda-sqs-event")["Records"][0]
        records = []
        for i, body in enumerate(bodies):
            record = copy.deepcopy(sample)
            record.update(messageId=f"m{i}", body=body)
            if fifo:
                record["attributes"].update(MessageGroupId="g", SequenceNumber=str(i + 1))
                record["eventSourceARN"] = "arn:aws:sqs:us-east-1:123456789012:sweep-events.fifo"
            records.append(record)
        return {"Records": records}

    def sns(self, message: str, command: str) -> str:
        envelope = aws_event("sns-to-sqs-envelope")
        envelope["Message"] = message
        envelope["MessageAttributes"] = {"command": {"Type": "String", "Value": command}}
        # Published now: a proof's age is judged at publication (the sample's is from 2012).
        envelope["Timestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return json.dumps(envelope)

    def drain_sweep_queue(self) -> list[dict[str, Any]]:
        got = []
        while True:
            msgs = (
                self.clients["sqs"]
                .receive_message(
                    QueueUrl=self.sweep_queue, MaxNumberOfMessages=10, WaitTimeSeconds=0
                )
                .get("Messages", [])
            )
            if not msgs:
                return got
            for m in msgs:
                got.append(json.loads(m["Body"]))
                self.clients["sqs"].delete_message(
                    QueueUrl=self.sweep_queue, ReceiptHandle=m["ReceiptHandle"]
                )


def with_code(env: Env, sub: SweepSubmission) -> SweepSubmission:
    """The submission with its code uploaded where `sweep()` puts it."""
    key = layout.code_key(sub.sweep_id, "abc")
    env.clients["s3"].put_object(Bucket=env.local.bucket, Key=key, Body=b"zip")
    code = CodeArtifact(s3_uri=f"s3://{env.local.bucket}/{key}", sha256="abc", size_bytes=3)
    return sub.model_copy(update={"code": code})


@pytest.fixture
def env(moto_endpoint: str, aws_credentials: None) -> Iterator[Env]:
    yield Env(moto_endpoint)
    runtime.install(None)
    sweep_lambda.install(None)


def test_a_sweep_command_is_recorded_once_kicked_and_runs_its_trials(env: Env) -> None:
    # GIVEN a sweep published on the jobs topic (delivered twice, as SQS may)
    sub = with_code(env, submission(n_trials=3, parallelism=2, pruner={"name": "none"}))
    body = env.sns(sub.model_dump_json(), "sweep")
    commands.handler(env.sqs_event(body, body), CONTEXT)
    # THEN one kick is queued for it (FIFO deduplication by id), and the record exists once
    kicks = env.drain_sweep_queue()
    assert kicks[0] == {"kind": "kick", "sweep_id": sub.sweep_id}
    # WHEN the sweep Lambda handles the kick
    sweep_lambda.handler(env.sqs_event(json.dumps(kicks[0]), fifo=True), CONTEXT)
    # THEN two trial jobs are recorded by the control plane, each tagged with its trial,
    # each with the sweep's code copied under its own prefix
    trials = engine_table(env).require(sub.sweep_id).trials
    assert [t.number for t in trials] == [0, 1]
    for number in (0, 1):
        job_id = trials[number].job_id
        record = env.control.jobs.get(job_id)
        assert record is not None and record.submission.sweep == TrialRef(
            sweep_id=sub.sweep_id, trial=number
        )
        assert record.submission.code is not None
        key = record.submission.code.s3_uri.removeprefix(f"s3://{env.local.bucket}/")
        assert key == layout.code_key(job_id, "abc")
        assert (
            env.clients["s3"].get_object(Bucket=env.local.bucket, Key=key)["Body"].read() == b"zip"
        )
    assert env.dead == []


def test_a_trial_report_reaches_the_sweep_queue(env: Env) -> None:
    sub = with_code(env, submission(n_trials=2, parallelism=1, pruner={"name": "none"}))
    commands.handler(env.sqs_event(env.sns(sub.model_dump_json(), "sweep")), CONTEXT)
    sweep_lambda.handler(env.sqs_event(json.dumps(env.drain_sweep_queue()[0]), fifo=True), CONTEXT)
    job_id = engine_table(env).require(sub.sweep_id).trials[0].job_id
    record = env.control.jobs.get(job_id)
    assert record is not None, env.dead
    attempt = record.current
    assert attempt is not None, (record.state, record.timeline)
    # WHEN its agent reports a value of the sweep's metric
    message = AgentMessage(
        job_id=job_id,
        attempt=attempt.number,
        instance_id=attempt.instance_id or "i-0123456789abcdef0",
        sent_at=datetime.now(UTC),
        seq=1,
        body=AgentProgress(step=10, total_steps=100, metrics={"val_loss": 0.5}),
    )
    agent_events.handler(env.sqs_event(message.model_dump_json()), CONTEXT)
    # THEN the sweep hears of it on its FIFO queue
    news = [m for m in env.drain_sweep_queue() if m["kind"] == "trial"]
    assert news and news[0]["job_id"] == job_id and news[0]["metrics"] == {"val_loss": 0.5}
    assert news[0]["step"] == 10 and news[0]["trial"] == 0


def test_a_published_job_cannot_claim_to_be_a_trial(env: Env) -> None:
    forged = JobSubmission(
        job_id=f"x-20261123000000-{secrets.token_hex(3)}",
        spec=TrainingEnvVar(name="x", entry_point="m:S"),
        submitted_at=datetime.now(UTC),
        sweep=TrialRef(sweep_id="someone-elses-sweep", trial=0),
    )
    commands.handler(env.sqs_event(env.sns(forged.model_dump_json(), "submit")), CONTEXT)
    assert env.control.jobs.get(forged.job_id) is None
    assert env.dead and "only respot's sweep function submits trials" in env.dead[0][1]


def test_a_sweep_cannot_borrow_code_from_elsewhere(env: Env) -> None:
    sub = submission()
    other = sub.code.model_copy(  # type: ignore[union-attr]
        update={"s3_uri": f"s3://{env.local.bucket}/jobs/victim-job/code/abc.zip"}
    )
    forged = sub.model_copy(update={"code": other})
    commands.handler(env.sqs_event(env.sns(forged.model_dump_json(), "sweep")), CONTEXT)
    assert env.drain_sweep_queue() == []
    assert "code must be at" in env.dead[-1][1]


def test_bad_sweep_messages_are_dead_lettered_with_the_reason(env: Env) -> None:
    sub = submission()
    broken = json.loads(sub.model_dump_json())
    broken["spec"]["search_space"]["lr"]["low"] = 5.0  # above high
    commands.handler(env.sqs_event(env.sns(json.dumps(broken), "sweep")), CONTEXT)
    sweep_lambda.handler(env.sqs_event("not json", fifo=True), CONTEXT)
    sweep_lambda.handler(
        env.sqs_event(json.dumps({"kind": "kick", "sweep_id": "nope"}), fifo=True), CONTEXT
    )
    reasons = [reason for _, reason in env.dead]
    assert any("search_space.lr" in r for r in reasons), reasons
    assert any("not a sweep message" in r for r in reasons), reasons
    assert any("no sweep 'nope'" in r for r in reasons), reasons


def test_only_the_owner_stops_a_sweep(env: Env) -> None:
    sub = with_code(env, submission(n_trials=2, parallelism=1))
    commands.handler(env.sqs_event(env.sns(sub.model_dump_json(), "sweep")), CONTEXT)
    env.drain_sweep_queue()

    def stop(by: str) -> None:
        command = SweepStopCommand(
            sweep_id=sub.sweep_id, requested_at=datetime.now(UTC), requested_by=by
        )
        commands.handler(env.sqs_event(env.sns(command.model_dump_json(), "sweep-stop")), CONTEXT)

    stop("arn:aws:sts::123456789012:assumed-role/researcher/mallory")
    assert env.drain_sweep_queue() == []
    assert "cannot stop it" in env.dead[-1][1]
    stop(sub.submitted_by or "")
    assert env.drain_sweep_queue() == [
        {"kind": "stop", "sweep_id": sub.sweep_id, "reason": "stopped by its owner"}
    ]


def test_a_sweep_no_sampler_can_draw_from_is_dead_lettered_without_failing_the_batch(
    env: Env,
) -> None:
    # Issue 24, item 7: a grid whose range overflows raised OverflowError in the commands
    # function, so the command was retried until redrive and dead-lettered with no reason.
    good = with_code(env, submission(n_trials=2, parallelism=1, pruner={"name": "none"}))
    bad = json.loads(submission().model_dump_json())
    bad["spec"]["search_space"] = {"x": {"type": "float", "low": -1e308, "high": 1e308, "step": 1}}
    bad["spec"]["sampler"] = {"name": "grid", "seed": 0}
    wide = json.loads(submission().model_dump_json())
    wide["spec"]["search_space"] = {"x": {"type": "float", "low": -1e308, "high": 1e308}}
    wide["spec"]["sampler"] = {"name": "random", "seed": 0}
    response = commands.handler(
        env.sqs_event(
            env.sns(json.dumps(bad), "sweep"),
            env.sns(json.dumps(wide), "sweep"),
            env.sns(good.model_dump_json(), "sweep"),
        ),
        CONTEXT,
    )
    # THEN nothing is retried: both bad ones are dead-lettered with the field and the fix
    assert response["batchItemFailures"] == []
    reasons = [reason for _, reason in env.dead]
    assert len(reasons) == 2, reasons
    assert all("search_space.x" in r and "too wide to draw from" in r for r in reasons), reasons
    # AND neither became a sweep, while the good one in the same batch was kicked
    assert engine_table(env).get(bad["sweep_id"]) is None
    assert engine_table(env).get(wide["sweep_id"]) is None
    assert env.drain_sweep_queue() == [{"kind": "kick", "sweep_id": good.sweep_id}]


def engine_table(env: Env) -> Any:
    from respot.sweep.table import SweepTable

    return SweepTable(env.control.jobs.table_name, env.control.jobs.client)


def test_ids_taken_before_the_sweep_do_not_fail_its_trials(env: Env) -> None:
    # Issue 24, item 4: trial ids were `<sweep>-t000`...: a researcher who published jobs
    # under those ids first made every trial fail ("a 3-trial sweep completed with no trial
    # run"). Trial ids now carry a random token, and their shape is reserved.
    sub = with_code(env, submission(n_trials=3, parallelism=3, pruner={"name": "none"}))
    squatters = []
    for number in range(3):
        for job_id in (f"{sub.sweep_id}-t{number:03d}", f"{sub.sweep_id}-t{number}"):
            squat = JobSubmission(
                job_id=job_id,
                spec=TrainingEnvVar(name="squat", entry_point="m:S"),
                submitted_at=datetime.now(UTC),
                submitted_by="arn:aws:sts::123456789012:assumed-role/researcher/mallory",
            )
            squatters.append(squat.job_id)
            commands.handler(env.sqs_event(env.sns(squat.model_dump_json(), "submit")), CONTEXT)
    assert all(env.control.jobs.get(j) is not None for j in squatters), env.dead
    # WHEN the sweep is published and kicked
    commands.handler(env.sqs_event(env.sns(sub.model_dump_json(), "sweep")), CONTEXT)
    sweep_lambda.handler(env.sqs_event(json.dumps(env.drain_sweep_queue()[0]), fifo=True), CONTEXT)
    # THEN every trial runs as a job of its own, none of them failed
    trials = engine_table(env).require(sub.sweep_id).trials
    assert len(trials) == 3
    assert [t.state.value for t in trials] == ["RUNNING"] * 3, [t.reason for t in trials]
    for trial in trials:
        assert trial.job_id not in squatters
        job = env.control.jobs.get(trial.job_id)
        assert job is not None and job.submission.sweep is not None
        assert job.submission.sweep.sweep_id == sub.sweep_id
    # AND the ids cannot be derived: two sweeps' trial 0 ids differ beyond the sweep id
    assert len({t.job_id.removeprefix(sub.sweep_id) for t in trials}) == 3
    # AND a researcher cannot publish a job under a trial-shaped id either
    taken = trials[0].job_id[:-10] + "0123456789"
    forged = JobSubmission(
        job_id=taken,
        spec=TrainingEnvVar(name="squat", entry_point="m:S"),
        submitted_at=datetime.now(UTC),
    )
    commands.handler(env.sqs_event(env.sns(forged.model_dump_json(), "submit")), CONTEXT)
    assert env.control.jobs.get(taken) is None
    assert "reserved for sweep trials" in env.dead[-1][1]


def test_a_trials_cancel_is_a_compare_and_set_on_its_job(env: Env) -> None:
    # Issue 23, item 15: the sweep's prune verdict cancels first and prunes only if the cancel
    # landed. The control plane says which: a live job is CANCELLED, one that ended first keeps
    # its end (here COMPLETED) and the cancel changes nothing.
    from respot.core.states import JobState

    sub = with_code(env, submission(n_trials=2, parallelism=2, pruner={"name": "none"}))
    commands.handler(env.sqs_event(env.sns(sub.model_dump_json(), "sweep")), CONTEXT)
    sweep_lambda.handler(env.sqs_event(json.dumps(env.drain_sweep_queue()[0]), fifo=True), CONTEXT)
    live, ended = (t.job_id for t in engine_table(env).require(sub.sweep_id).trials)

    def completed(record: Any) -> Any:
        return record.model_copy(update={"state": JobState.COMPLETED})

    env.control.jobs.update(ended, completed)
    trials = sweep_lambda.ControlPlaneTrials(env.control)
    assert trials.cancel(ended, "trial 1 pruned at step 10") == "COMPLETED"
    after = env.control.jobs.get(ended)
    assert after is not None and after.state is JobState.COMPLETED
    assert trials.cancel(live, "trial 0 pruned at step 10") == "CANCELLED"
    cancelled = env.control.jobs.get(live)
    assert cancelled is not None and cancelled.state is JobState.CANCELLED


def test_a_check_that_overflows_on_a_raw_command_dead_letters_it(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Defense behind the spec's checks: any validator that overflows on the input (as the
    # grid's size did) is a poison message with its reason, not a retry until redrive.
    from respot.sweep.model import SweepSubmission

    def overflowing(text: str) -> Any:
        raise OverflowError("cannot convert float infinity to integer")

    monkeypatch.setattr(SweepSubmission, "model_validate_json", overflowing)
    sub = submission()
    response = commands.handler(env.sqs_event(env.sns(sub.model_dump_json(), "sweep")), CONTEXT)
    assert response["batchItemFailures"] == []
    assert env.dead and "OverflowError" in env.dead[-1][1]


def test_run_refuses_a_trial_shaped_job_id_on_the_laptop() -> None:
    from respot.client.handle import run
    from respot.exceptions import SpecError

    with pytest.raises(SpecError) as err:
        run({"name": "x", "entry_point": "m:S"}, job_id="s-20261123000000-abcdef-t000-0123456789")
    assert any(
        p.startswith("job_id:") and "reserved for sweep trials" in p for p in err.value.problems
    )
