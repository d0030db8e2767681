"""`market:` in a job's spec: spot (the default) or on-demand; contradictions refused naming
the fields and the fix, on the SDK's and a raw message's path alike."""

from __future__ import annotations

import pytest

from respot.exceptions import SpecError
from respot.spec.training import TrainingEnvVar, validate_spec
from respot.wire.messages import JobSubmission

BASE = {"name": "demo", "command": ["python", "train.py"]}


def test_spot_is_the_default_and_on_demand_travels() -> None:
    assert TrainingEnvVar(**BASE).market == "spot"
    spec = validate_spec({**BASE, "market": "on-demand"})
    assert spec.market == "on-demand"
    assert TrainingEnvVar.model_validate_json(spec.to_json()).market == "on-demand"


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"market": "ondemand"}, "market: Input should be 'spot' or 'on-demand'"),
        (
            {"market": "on-demand", "max_spot_price": 0.5},
            "drop max_spot_price, or set market: spot",
        ),
        ({"market": "on-demand", "on_demand_fallback": False}, "on_demand_fallback: false"),
    ],
)
def test_bad_markets_are_refused_naming_the_fix(fields: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError) as err:
        validate_spec({**BASE, **fields})
    assert words in str(err.value)
    # a raw submission (what the control plane reads) is held to the same rule
    raw = {"job_id": "job-1", "submitted_at": "2026-11-27T00:00:00Z", "spec": {**BASE, **fields}}
    with pytest.raises(Exception, match="market"):
        JobSubmission.model_validate(raw)
