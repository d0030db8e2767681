"""The stack setting `idle_gpus` (issue 26): threshold, period and action (`warn` | `stop`),
checked at synth with the field named, handed to every function as RESPOT_IDLE_GPUS, read
into the core's settings; a malformed environment value is refused naming the variable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from infra.settings import DeploySettings, DeploySettingsError
from respot.control.config import (
    ENV_IDLE_GPUS,
    ConfigError,
    ControlPlaneConfig,
    IdleGpus,
    IdleGpusError,
    parse_idle_gpus,
)

BASE_ENV = {
    "RESPOT_TABLE": "t",
    "RESPOT_BUCKET": "b",
    "RESPOT_LAUNCH_TEMPLATE_ID": "lt-1",
    "RESPOT_SUBNETS": '[{"subnet_id": "subnet-1", "availability_zone": "us-east-1a"}]',
    "RESPOT_INSTANCE_TYPES": "g5.xlarge",
    "RESPOT_AGENT_QUEUE_URL": "https://sqs/q",
}


def test_the_defaults_are_5_percent_for_30_minutes_and_a_warning() -> None:
    assert parse_idle_gpus(None) == IdleGpus(5.0, timedelta(minutes=30), "warn")
    assert parse_idle_gpus({}) == IdleGpus()
    settings = ControlPlaneConfig.from_env(BASE_ENV).settings()
    assert (settings.idle_gpu_pct, settings.idle_gpu_period, settings.idle_gpu_action) == (
        5.0,
        timedelta(minutes=30),
        "warn",
    )


def test_the_environment_value_reaches_the_core_s_settings() -> None:
    env = {
        **BASE_ENV,
        ENV_IDLE_GPUS: '{"threshold_pct": 10, "period_minutes": 15, "action": "stop"}',
    }
    settings = ControlPlaneConfig.from_env(env).settings()
    assert settings.idle_gpu_pct == 10.0
    assert settings.idle_gpu_period == timedelta(minutes=15)
    assert settings.idle_gpu_action == "stop"


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"threshold_pct": 0}, "idle_gpus.threshold_pct: 0 is not a percentage"),
        ({"threshold_pct": 101}, "idle_gpus.threshold_pct: 101"),
        ({"threshold_pct": "5"}, "idle_gpus.threshold_pct: '5'"),
        ({"period_minutes": 0.5}, "idle_gpus.period_minutes: 0.5 is not a number of minutes"),
        ({"period_minutes": True}, "idle_gpus.period_minutes: True"),
        ({"action": "kill"}, "idle_gpus.action: 'kill' is not warn or stop"),
        ({"threshold": 5}, "idle_gpus: unknown field(s) threshold; known: threshold_pct"),
        ([5, 30], "idle_gpus: give an object"),
    ],
)
def test_a_bad_value_is_refused_with_the_field_named(value: object, named: str) -> None:
    with pytest.raises(IdleGpusError) as err:
        parse_idle_gpus(value)  # type: ignore[arg-type]
    assert named in str(err.value)
    # at synth, from cdk.json or `-c`, the same words
    with pytest.raises(DeploySettingsError) as at_synth:
        DeploySettings.from_context({"idle_gpus": value}.get)
    assert named in str(at_synth.value) or "idle_gpus: give a JSON object" in str(at_synth.value)


def test_a_malformed_environment_value_names_the_variable() -> None:
    for raw in ("{not json", '{"action": "kill"}'):
        with pytest.raises(ConfigError, match=ENV_IDLE_GPUS):
            ControlPlaneConfig.from_env({**BASE_ENV, ENV_IDLE_GPUS: raw})


def test_the_setting_from_the_command_line_is_read_as_json() -> None:
    s = DeploySettings.from_context(
        {"idle_gpus": '{"threshold_pct": 2.5, "period_minutes": 60, "action": "stop"}'}.get
    )
    assert s.idle_gpus == {"threshold_pct": 2.5, "period_minutes": 60, "action": "stop"}
