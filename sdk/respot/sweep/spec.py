"""What a researcher asks of a sweep: `SweepSpec`, validated on the laptop before anything is spent.

A sweep file (YAML or JSON) has the sweep's own keys and a `job:` block with the same fields
as `respot run` (`TrainingEnvVar`):

    name: lr-sweep
    metric: val_loss            # the name the session passes to self.report(step, val_loss=...)
    direction: minimize
    n_trials: 20
    parallelism: 4
    search_space:
      lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
      hidden: {type: int, low: 16, high: 256, step: 16}
      optimizer: {type: categorical, choices: [adam, sgd]}
    sampler: {name: tpe, seed: 0}
    pruner: {name: median, n_startup_trials: 5, n_warmup_steps: 100}
    job: {entry_point: ..., source_dir: ..., instance_types: [...], ...}

Each trial is a respot job whose `hyperparameters` are the job's plus the trial's parameters.
Errors name the field (`search_space.lr.low`) and the fix, like `respot.spec.training`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from respot.exceptions import SpecError
from respot.spec.training import TrainingEnvVar, describe_validation_error

SWEEP_SCHEMA_VERSION: Literal[1] = 1
MAX_TRIALS = 1000
MAX_PARALLELISM = 64
MAX_PARAMETERS = 32
MAX_CHOICES = 64
MAX_GRID_POINTS = 100_000
# Integers Optuna draws exactly (its samplers work in float64; TPE fails on larger ones) and
# that every JSON reader keeps exact.
MAX_INT_MAGNITUDE = 2**53
# Steps across a float range: Optuna checks a step against the range in 28-digit decimals.
MAX_FLOAT_STEPS = 10**15
MAX_CHOICE_TEXT = 256
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_METRIC_NAME = re.compile(r"[A-Za-z0-9_./-]{1,128}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatParam(_Strict):
    """A real number in [low, high], optionally on a log scale or on a grid of `step`."""

    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            raise ValueError("low and high must be finite numbers (not .nan or .inf)")
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if not math.isfinite(self.high - self.low):
            # The samplers draw low + u * (high - low): a range that overflows cannot be drawn.
            raise ValueError(
                f"the range high - low ({self.high:g} - {self.low:g}) is too wide to draw from; "
                "narrow it, or use log: true with low > 0"
            )
        if self.log and self.low <= 0:
            raise ValueError(f"log: true needs low > 0 (got {self.low}); raise low or drop log")
        if self.log and self.step is not None:
            raise ValueError("step and log: true cannot be combined; drop one of them")
        if self.step is not None:
            if not math.isfinite(self.step):
                raise ValueError("step must be a finite number (not .nan or .inf)")
            if self.step > self.high - self.low:
                raise ValueError(
                    f"step ({self.step:g}) is larger than the range high - low "
                    f"({self.high - self.low:g}); use a smaller step"
                )
            if (self.high - self.low) / self.step > MAX_FLOAT_STEPS:
                raise ValueError(
                    f"step ({self.step:g}) cuts the range into more than {MAX_FLOAT_STEPS:.0e} "
                    "steps; use a larger step or drop it"
                )
        return self


class IntParam(_Strict):
    """An integer in [low, high] (both included), on a grid of `step` or a log scale."""

    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        for name, value in (("low", self.low), ("high", self.high), ("step", self.step)):
            if abs(value) > MAX_INT_MAGNITUDE:
                raise ValueError(
                    f"{name} must be within +-{MAX_INT_MAGNITUDE:,} (2**53, what the samplers "
                    "draw exactly); use type: float for larger numbers"
                )
        if self.low >= self.high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if self.log and self.low < 1:
            raise ValueError(f"log: true needs low >= 1 (got {self.low}); raise low or drop log")
        if self.log and self.step != 1:
            raise ValueError("step and log: true cannot be combined; drop one of them")
        if self.step > self.high - self.low:
            raise ValueError(
                f"step ({self.step}) is larger than the range high - low "
                f"({self.high - self.low}); use a smaller step"
            )
        return self


class CategoricalParam(_Strict):
    """One of a list of values (text, numbers, true/false)."""

    type: Literal["categorical"]
    choices: list[str | bool | int | float] = Field(min_length=1, max_length=MAX_CHOICES)

    @model_validator(mode="after")
    def _check(self) -> CategoricalParam:
        seen: set[str] = set()
        for value in self.choices:
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(
                    f"choices lists {value!r}; every choice must be a finite number or text "
                    "(not .nan or .inf)"
                )
            integer = isinstance(value, int) and not isinstance(value, bool)
            if integer and abs(int(value)) > MAX_INT_MAGNITUDE:
                raise ValueError(
                    f"a choice is an integer beyond +-{MAX_INT_MAGNITUDE:,} (2**53); "
                    "write it as text or a smaller number"
                )
            if isinstance(value, str) and len(value) > MAX_CHOICE_TEXT:
                raise ValueError(
                    f"a choice is {len(value):,} characters of text; at most {MAX_CHOICE_TEXT}"
                )
            key = f"{type(value).__name__}:{value!r}"
            if key in seen:
                raise ValueError(f"choices lists {value!r} twice; list each value once")
            seen.add(key)
        return self


Parameter = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]


class SamplerSpec(_Strict):
    """How the next trial's parameters are chosen (Optuna samplers)."""

    name: Literal["tpe", "random", "grid"] = "tpe"
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    n_startup_trials: int = Field(default=5, ge=0, le=MAX_TRIALS)  # tpe: random trials first


class PrunerSpec(_Strict):
    """When a trial that reports poorly is stopped early (Optuna pruners)."""

    name: Literal["median", "percentile", "successive_halving", "hyperband", "none"] = "median"
    n_startup_trials: int = Field(default=5, ge=0, le=MAX_TRIALS)
    n_warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)
    percentile: float = Field(default=50.0, gt=0, lt=100)  # percentile pruner only
    min_resource: int | None = Field(default=None, ge=1)  # successive halving / hyperband
    max_resource: int | None = Field(default=None, ge=1)  # hyperband


class SweepSpec(_Strict):
    """A sweep: the search space, the metric and its direction, the budget, and the job."""

    schema_version: Literal[1] = SWEEP_SCHEMA_VERSION
    # pydantic matches with Rust regex, whose `$` is the very end (no trailing newline).
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
    metric: str
    direction: Literal["minimize", "maximize"] = "minimize"
    search_space: dict[str, Parameter] = Field(min_length=1, max_length=MAX_PARAMETERS)
    n_trials: int = Field(ge=1, le=MAX_TRIALS)
    parallelism: int = Field(default=1, ge=1, le=MAX_PARALLELISM)
    sampler: SamplerSpec = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec = Field(default_factory=PrunerSpec)
    job: TrainingEnvVar

    @model_validator(mode="before")
    @classmethod
    def _job_named_after_sweep(cls, data: Any) -> Any:
        # The trials are named after the sweep unless the job block names them.
        if isinstance(data, dict) and isinstance(data.get("job"), dict):
            job = data["job"]
            if "name" not in job and isinstance(data.get("name"), str):
                data = {**data, "job": {**job, "name": data["name"]}}
        return data

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        if not _METRIC_NAME.fullmatch(self.metric):
            raise ValueError(
                f"metric {self.metric!r} is not a metric name; use the name the session "
                "reports, e.g. 'val_loss' (letters, digits, '_', '.', '/', '-')"
            )
        for name in self.search_space:
            if not _PARAM_NAME.fullmatch(name):
                raise ValueError(
                    f"search_space.{name}: not a parameter name; use letters, digits and '_' "
                    "and start with a letter, e.g. 'lr'"
                )
        if self.sampler.name == "grid":
            points = 1
            for name, param in self.search_space.items():
                if isinstance(param, FloatParam) and param.step is None:
                    raise ValueError(
                        f"search_space.{name}: the grid sampler needs a step for floats "
                        "(or use type: categorical)"
                    )
                size = _grid_size(param)
                if size > MAX_GRID_POINTS:
                    raise ValueError(
                        f"search_space.{name}: the grid sampler would try more than "
                        f"{MAX_GRID_POINTS:,} values of it; use a larger step, or sampler tpe"
                    )
                points *= size
            if points > MAX_GRID_POINTS:
                raise ValueError(
                    f"search_space: the grid has {points:,} points; at most "
                    f"{MAX_GRID_POINTS:,} (use larger steps, fewer choices, or sampler tpe)"
                )
        return self

    def trial_hyperparameters(self, params: dict[str, Any]) -> dict[str, Any]:
        """The trial job's hyperparameters: the job's own, then the trial's on top."""
        return {**self.job.hyperparameters, **params}


def _grid_size(param: FloatParam | IntParam | CategoricalParam) -> int:
    """How many values the grid tries of `param`; more than MAX_GRID_POINTS is reported as
    MAX_GRID_POINTS + 1 (never an overflow: the parameter's own checks keep it finite)."""
    if isinstance(param, CategoricalParam):
        return len(param.choices)
    if isinstance(param, IntParam):
        return min((param.high - param.low) // param.step + 1, MAX_GRID_POINTS + 1)
    assert param.step is not None
    steps = (param.high - param.low) / param.step
    if not math.isfinite(steps) or steps >= MAX_GRID_POINTS:
        return MAX_GRID_POINTS + 1
    return int(steps + 1e-9) + 1


def validate_sweep(data: Any) -> SweepSpec:
    """Build a `SweepSpec` from a mapping or JSON, raising `SpecError` with one line a problem."""
    if isinstance(data, SweepSpec):
        return data
    try:
        if isinstance(data, str | bytes):
            return SweepSpec.model_validate_json(data)
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_sweep_line(line) for line in describe_validation_error(exc)]) from exc


def _sweep_line(line: str) -> str:
    """Name the parameter, not pydantic's union branch (`search_space.lr.float.low`), and
    not `spec:` where a check of the whole sweep names the field itself."""
    line = re.sub(r"^spec: (search_space\.[^.:\s]+: )", r"\1", line)
    return re.sub(r"^(search_space\.[^.:\s]+)\.(?:float|int|categorical)\b", r"\1", line)
