"""The sweep engine: trials asked, told, pruned, failed and repaired, each exactly once."""

from __future__ import annotations

import optuna
import pytest

from respot.sweep import study as studies
from respot.sweep.engine import SweepEngine
from respot.sweep.model import SweepKick, SweepState, SweepStop, TrialEvent, TrialState
from respot.sweep.table import SweepTable
from tests.sweep.conftest import FakeJobs, FakeNews, submission

_TABLES: dict[str, SweepTable] = {}  # sweep id -> its table, to find a trial's job id


def started(engine: SweepEngine, **changes: object) -> str:
    sub = submission(**changes)  # type: ignore[arg-type]
    _record, created = engine.create(sub)
    assert created
    _TABLES[sub.sweep_id] = engine.table
    engine.handle(SweepKick(sweep_id=sub.sweep_id))
    return sub.sweep_id


def trial_job_id(sweep_id: str, number: int) -> str:
    """The job id the sweep's record gave trial `number` (ids are random: read, not derived)."""
    record = _TABLES[sweep_id].require(sweep_id)
    return next(t.job_id for t in record.trials if t.number == number)


def event(sweep_id: str, trial: int, state: str = "RUNNING", **kw: object) -> TrialEvent:
    return TrialEvent(
        sweep_id=sweep_id,
        job_id=trial_job_id(sweep_id, trial),
        trial=trial,
        state=state,
        **kw,  # type: ignore[arg-type]
    )


def test_a_kick_submits_parallelism_trials_with_their_parameters(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine)
    # THEN two trials run (parallelism 2), each a job with the job's and the trial's params
    assert sorted(jobs.submitted) == sorted([trial_job_id(sweep_id, 0), trial_job_id(sweep_id, 1)])
    record = table.require(sweep_id)
    for trial in record.trials:
        sub = jobs.submitted[trial.job_id]
        assert sub.sweep is not None and sub.sweep.trial == trial.number
        assert sub.spec.hyperparameters == {"steps": 100, **trial.params}  # lr overridden
        assert sub.code is not None and trial.job_id in sub.code.s3_uri
        assert sub.submitted_by == record.submission.submitted_by
    # AND the two trials are different draws
    assert record.trials[0].params != record.trials[1].params
    # AND a second kick (a redelivery) asks for nothing more
    engine.handle(SweepKick(sweep_id=sweep_id))
    assert len(jobs.submitted) == 2


def test_results_move_the_study_on_until_n_trials(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable, news: FakeNews
) -> None:
    sweep_id = started(engine, n_trials=4, pruner={"name": "none"})
    values = {0: 0.5, 1: 0.2, 2: 0.9, 3: 0.1}
    for number in range(4):
        engine.handle(
            event(sweep_id, number, "COMPLETED", step=100, metrics={"val_loss": values[number]})
        )
    record = table.require(sweep_id)
    assert record.state is SweepState.COMPLETED
    assert [t.state for t in record.trials] == [TrialState.COMPLETE] * 4
    best = record.best()
    assert best is not None and best.number == 3 and best.value == 0.1
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert study.best_trial.number == 3 and study.best_value == 0.1
    assert len(jobs.submitted) == 4
    # AND Slack heard of each finished trial once, and of the end
    finished = [n for _, numbers in news.posts for n in numbers]
    assert sorted(finished) == [0, 1, 2, 3]
    assert news.posts[-1][0] == "COMPLETED"
    # AND a late duplicate changes nothing
    engine.handle(event(sweep_id, 1, "COMPLETED", step=100, metrics={"val_loss": 99.0}))
    assert table.require(sweep_id).trials[1].value == 0.2


def test_a_failed_trial_is_recorded_with_its_reason_and_the_study_goes_on(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine, n_trials=3, pruner={"name": "none"})
    engine.handle(event(sweep_id, 0, "FAILED", reason="the session raised ValueError: nan"))
    engine.handle(event(sweep_id, 1, "COMPLETED", step=5, metrics={"loss": 1.0}))
    record = table.require(sweep_id)
    assert record.trials[0].state is TrialState.FAIL
    assert "ValueError: nan" in (record.trials[0].reason or "")
    assert record.trials[1].state is TrialState.FAIL  # completed without the metric
    assert "without reporting 'val_loss'" in (record.trials[1].reason or "")
    assert len(jobs.submitted) == 3  # the study went on
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert study.trials[0].state is optuna.trial.TrialState.FAIL


def test_intermediate_values_reach_the_pruner_and_a_bad_trial_is_stopped(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine, n_trials=4, parallelism=2)
    # GIVEN trial 0 completed with good values at every step
    for step in (10, 20, 30):
        engine.handle(event(sweep_id, 0, step=step, metrics={"val_loss": 0.1}))
    engine.handle(event(sweep_id, 0, "COMPLETED", step=30, metrics={"val_loss": 0.1}))
    # WHEN trial 1 reports far worse at the same steps
    engine.handle(event(sweep_id, 1, step=10, metrics={"val_loss": 5.0}))
    # THEN it is pruned at once: PRUNED (not FAILED), and its job cancelled with the reason
    record = table.require(sweep_id)
    trial = record.trials[1]
    assert trial.state is TrialState.PRUNED
    assert "pruned at step 10" in (trial.reason or "")
    assert [j for j, _ in jobs.cancelled] == [trial_job_id(sweep_id, 1)]
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert study.trials[1].state is optuna.trial.TrialState.PRUNED
    assert study.trials[1].intermediate_values == {10: 5.0}
    # AND the job's own end (CANCELLED) does not turn the trial into a failure
    engine.handle(event(sweep_id, 1, "CANCELLED", reason="trial 1 pruned"))
    assert table.require(sweep_id).trials[1].state is TrialState.PRUNED
    # AND a value told twice (a redelivered report) is told once: not even a journal write
    engine.handle(event(sweep_id, 2, step=10, metrics={"val_loss": 0.1}))
    logs = len(list(table.journal(sweep_id).read_logs(0)))
    engine.handle(event(sweep_id, 2, step=10, metrics={"val_loss": 0.1}))
    assert len(list(table.journal(sweep_id).read_logs(0))) == logs
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert study.trials[2].intermediate_values == {10: 0.1}


def test_an_interrupted_trial_keeps_its_number_and_parameters(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine, n_trials=2, pruner={"name": "none"})
    params = table.require(sweep_id).trials[0].params
    # The job is interrupted and resumed: its events keep coming under the same job id.
    engine.handle(event(sweep_id, 0, "INTERRUPTED", step=40, metrics={"val_loss": 0.4}))
    engine.handle(event(sweep_id, 0, "RUNNING", step=60, metrics={"val_loss": 0.3}))
    engine.handle(event(sweep_id, 0, "COMPLETED", step=100, metrics={"val_loss": 0.2}))
    record = table.require(sweep_id)
    assert record.trials[0].params == params and record.trials[0].value == 0.2
    assert len(jobs.submitted) == 2  # no new trial was started for the interruption


def test_a_crash_between_ask_and_record_is_repaired(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine, n_trials=3, parallelism=1, pruner={"name": "none"})
    # GIVEN Optuna asked for a trial that the record never got (the Lambda died in between)
    record = table.require(sweep_id)
    study = studies.open_study(table.journal(sweep_id), record.spec)
    orphan = study.ask(studies.distributions(record.spec))
    # WHEN the next message arrives
    engine.handle(event(sweep_id, 0, "COMPLETED", step=1, metrics={"val_loss": 1.0}))
    # THEN the orphan is closed as failed, and the sweep asks a fresh trial with a job
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert study.trials[orphan.number].state is optuna.trial.TrialState.FAIL
    record = table.require(sweep_id)
    assert [t.number for t in record.trials] == [0, orphan.number + 1]
    assert trial_job_id(sweep_id, orphan.number + 1) in jobs.submitted


def test_a_trial_that_cannot_start_fails_and_the_next_one_is_asked(
    table: SweepTable, news: FakeNews
) -> None:
    jobs = FakeJobs()
    engine = SweepEngine(table=table, jobs=jobs, news=news)
    sub = submission(n_trials=3, parallelism=1)
    jobs.refuse_first = 1
    engine.create(sub)
    engine.handle(SweepKick(sweep_id=sub.sweep_id))
    record = table.require(sub.sweep_id)
    assert record.trials[0].state is TrialState.FAIL
    assert "RunInstances said no" in (record.trials[0].reason or "")
    assert record.trials[1].state is TrialState.RUNNING
    assert record.trials[1].job_id in jobs.submitted


def test_stop_cancels_running_trials_and_ends_the_sweep(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine)
    engine.handle(SweepStop(sweep_id=sweep_id, reason="enough"))
    record = table.require(sweep_id)
    assert record.state is SweepState.STOPPED
    assert sorted(j for j, _ in jobs.cancelled) == sorted(t.job_id for t in record.trials)
    # AND its running trials show as stopped (PRUNED: Optuna's nearest state), not FAIL
    assert [t.state for t in record.trials] == [TrialState.PRUNED] * 2
    assert all(t.reason == "stopped with the sweep: enough" for t in record.trials)
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.PRUNED] * 2
    from respot.notify.sweep_thread import trial_reply

    assert trial_reply(record, record.trials[0]).text.startswith(
        "Trial 0 stopped with the sweep: enough"
    )
    # AND a report from a trial still running afterwards gets that trial cancelled too
    jobs.cancelled.clear()
    engine.handle(event(sweep_id, 0, step=5, metrics={"val_loss": 1.0}))
    assert [j for j, _ in jobs.cancelled] == [trial_job_id(sweep_id, 0)]
    assert len(jobs.submitted) == 2


def test_the_same_seed_gives_the_same_sweep(table: SweepTable) -> None:
    def params(sweep_id: str) -> list[dict[str, object]]:
        jobs = FakeJobs()
        engine = SweepEngine(table=table, jobs=jobs)
        engine.create(submission(sweep_id=sweep_id, n_trials=3, parallelism=3))
        engine.handle(SweepKick(sweep_id=sweep_id))
        return [t.params for t in table.require(sweep_id).trials]

    assert params("a-20261123000000-aaaaaa") == params("b-20261123000000-bbbbbb")


def test_a_message_for_an_unknown_trial_or_sweep(engine: SweepEngine, table: SweepTable) -> None:
    sweep_id = started(engine)
    done = engine.handle(
        TrialEvent(sweep_id=sweep_id, job_id="someone-else", trial=0, state="COMPLETED")
    )
    assert done.outcome.startswith("ignored")
    from respot.sweep.exceptions import SweepNotFoundError

    with pytest.raises(SweepNotFoundError):
        engine.handle(SweepKick(sweep_id="nope"))


def test_a_grid_sweep_never_runs_a_point_twice_even_in_parallel(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    # Optuna's GridSampler, rebuilt per message, repeats points still running; ours does not.
    sweep_id = started(
        engine,
        n_trials=10,
        parallelism=2,
        search_space={"lr": {"type": "categorical", "choices": [0.05, 0.3, 40.0]}},
        sampler={"name": "grid", "seed": 0},
        pruner={"name": "none"},
    )
    engine.handle(event(sweep_id, 0, "COMPLETED", step=1, metrics={"val_loss": 1.0}))
    engine.handle(event(sweep_id, 1, "COMPLETED", step=1, metrics={"val_loss": 2.0}))
    engine.handle(event(sweep_id, 2, "COMPLETED", step=1, metrics={"val_loss": 3.0}))
    record = table.require(sweep_id)
    assert sorted(t.params["lr"] for t in record.trials) == [0.05, 0.3, 40.0]
    assert record.state is SweepState.COMPLETED  # the grid is done before n_trials
    assert len(jobs.submitted) == 3


def test_a_pruned_trial_whose_cancel_was_lost_is_cancelled_again(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    sweep_id = started(engine, n_trials=3, parallelism=2)
    for step in (10, 20):
        engine.handle(event(sweep_id, 0, step=step, metrics={"val_loss": 0.1}))
    engine.handle(event(sweep_id, 0, "COMPLETED", step=20, metrics={"val_loss": 0.1}))
    engine.handle(event(sweep_id, 1, step=10, metrics={"val_loss": 5.0}))
    assert table.require(sweep_id).trials[1].state is TrialState.PRUNED
    # GIVEN the cancel after that write was lost, and the job goes on reporting
    jobs.cancelled.clear()
    engine.handle(event(sweep_id, 1, step=20, metrics={"val_loss": 5.0}))
    # THEN it is cancelled again
    assert [j for j, _ in jobs.cancelled] == [trial_job_id(sweep_id, 1)]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_the_widest_ranges_the_spec_accepts_are_drawn(
    sampler: str, engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    # Issue 24, item 7: a range the sampler could not draw from left the sweep RUNNING with
    # no trial. Whatever the spec accepts, up to its limits, must be drawn, by TPE too once it
    # has completed trials to model.
    sweep_id = started(
        engine,
        n_trials=3,
        parallelism=1,
        search_space={
            "x": {"type": "float", "low": -8e307, "high": 8e307},
            "n": {"type": "int", "low": -(2**53), "high": 2**53},
            "w": {"type": "float", "low": 1e-300, "high": 1e300, "log": True},
        },
        sampler={"name": sampler, "seed": 0, "n_startup_trials": 1},
        pruner={"name": "none"},
    )
    for number in range(3):
        record = table.require(sweep_id)
        assert len(record.trials) == number + 1, record.trials
        engine.handle(event(sweep_id, number, "COMPLETED", step=1, metrics={"val_loss": 1.0}))
    record = table.require(sweep_id)
    assert record.state is SweepState.COMPLETED
    assert [t.state for t in record.trials] == [TrialState.COMPLETE] * 3
    assert len(jobs.submitted) == 3


def test_a_sampler_that_cannot_draw_stops_the_sweep_with_the_reason(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Defense in depth behind the spec's checks (a record an older respot accepted): the sweep
    # does not stay RUNNING with no trial, it stops and says why.
    from optuna.distributions import FloatDistribution

    sub = submission(n_trials=3, parallelism=2)
    engine.create(sub)
    monkeypatch.setattr(
        studies, "distributions", lambda spec: {"lr": FloatDistribution(-1e308, 1e308)}
    )
    engine.handle(SweepKick(sweep_id=sub.sweep_id))
    record = table.require(sub.sweep_id)
    assert record.state is SweepState.STOPPED
    assert "the sampler cannot draw a trial: OverflowError" in (record.reason or "")
    assert record.trials == [] and jobs.submitted == {}


def test_a_prune_verdict_that_loses_to_the_jobs_completion_leaves_the_trial_complete(
    engine: SweepEngine, jobs: FakeJobs, table: SweepTable
) -> None:
    # Issue 23, item 15: trial 1 was PRUNED while its job COMPLETED (the verdict raced an
    # interrupted trial's completion). The job's record decides, by compare-and-set.
    sweep_id = started(engine, n_trials=3, parallelism=2)
    for step in (10, 20):
        engine.handle(event(sweep_id, 0, step=step, metrics={"val_loss": 0.1}))
    engine.handle(event(sweep_id, 0, "COMPLETED", step=20, metrics={"val_loss": 0.1}))
    # GIVEN trial 1's job completed before the verdict's cancel reached it
    jobs.ended[trial_job_id(sweep_id, 1)] = "COMPLETED"
    # WHEN a late report (step 10, far worse) makes the pruner say stop
    done = engine.handle(event(sweep_id, 1, step=10, metrics={"val_loss": 5.0}))
    # THEN the trial is not pruned: the cancel found the job completed
    assert "not pruned" in done.outcome
    assert table.require(sweep_id).trials[1].state is TrialState.RUNNING
    # AND the job's completion, which follows on the queue, decides the trial
    engine.handle(event(sweep_id, 1, "COMPLETED", step=20, metrics={"val_loss": 4.0}))
    record = table.require(sweep_id)
    assert record.trials[1].state is TrialState.COMPLETE and record.trials[1].value == 4.0
    study = studies.open_study(table.journal(sweep_id), record.spec)
    assert study.trials[1].state is optuna.trial.TrialState.COMPLETE
