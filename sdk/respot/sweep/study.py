"""The Optuna side of a sweep: distributions, sampler, pruner and the study on its journal.

The sweep Lambda opens the study afresh on each message, so nothing here may depend on state
kept between calls. Two consequences:
- Samplers are seeded with (the spec's seed, the number of trials so far), not the seed
  alone: a sampler rebuilt with one fixed seed would draw the same "random" parameters for
  every trial. The sequence of a sweep is still reproducible from its spec.
- The pruner is rebuilt from the spec; Optuna's pruners keep no state outside the study.
- Grid sweeps do not use Optuna's `GridSampler`: rebuilt per message, and with trials
  running in parallel, it hands out a grid point that is still running (checked: with 3
  points and 2 running it repeats one). The engine instead takes the next point of a seeded
  order of the whole grid that no trial of the record has, and enqueues it.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import TYPE_CHECKING, Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.storages import JournalStorage

from respot.sweep.spec import CategoricalParam, FloatParam, IntParam, SweepSpec

if TYPE_CHECKING:
    from optuna.storages.journal import BaseJournalBackend

optuna.logging.set_verbosity(optuna.logging.WARNING)

STUDY_NAME = "respot"  # one study per journal: the journal is the sweep's own
GRID_POINTS_MAX = 100_000  # the whole grid (every combination), see SweepSpec


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    """Optuna distributions of the search space, in the spec's order."""
    out: dict[str, BaseDistribution] = {}
    for name, param in spec.search_space.items():
        if isinstance(param, FloatParam):
            out[name] = FloatDistribution(param.low, param.high, log=param.log, step=param.step)
        elif isinstance(param, IntParam):
            out[name] = IntDistribution(param.low, param.high, log=param.log, step=param.step)
        else:
            out[name] = CategoricalDistribution(param.choices)
    return out


def grid(spec: SweepSpec) -> dict[str, list[Any]]:
    """Every value the grid tries, per parameter."""
    values: dict[str, list[Any]] = {}
    for name, param in spec.search_space.items():
        if isinstance(param, CategoricalParam):
            values[name] = list(param.choices)
        elif isinstance(param, IntParam):
            values[name] = list(range(param.low, param.high + 1, param.step))
        else:
            assert param.step is not None  # checked by SweepSpec
            n = int((param.high - param.low) / param.step + 1e-9) + 1
            values[name] = [param.low + i * param.step for i in range(n)]
    return values


def grid_points(spec: SweepSpec) -> list[dict[str, Any]]:
    """Every combination of the grid, in an order fixed by the sampler's seed."""
    import numpy as np

    values = grid(spec)
    names = list(values)
    points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values.values())]
    order = np.random.default_rng(spec.sampler.seed).permutation(len(points))
    return [points[i] for i in order]


def next_grid_point(spec: SweepSpec, taken: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first grid point in seeded order that no trial has taken; None when all are."""
    return next((p for p in grid_points(spec) if p not in taken), None)


def trial_seed(spec: SweepSpec, n_trials_so_far: int) -> int:
    """The sampler's seed for the next trial: reproducible, and new for each trial."""
    digest = hashlib.sha256(f"{spec.sampler.seed}:{n_trials_so_far}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def make_sampler(spec: SweepSpec, n_trials_so_far: int) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded for the trial after `n_trials_so_far`."""
    seed = trial_seed(spec, n_trials_so_far)
    if spec.sampler.name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler.name == "grid":
        # The point itself is chosen by `next_grid_point` and enqueued; nothing is sampled.
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=spec.sampler.n_startup_trials)


def make_pruner(spec: SweepSpec) -> optuna.pruners.BasePruner:
    """The spec's pruner."""
    p = spec.pruner
    if p.name == "none":
        return optuna.pruners.NopPruner()
    if p.name == "percentile":
        return optuna.pruners.PercentilePruner(
            p.percentile,
            n_startup_trials=p.n_startup_trials,
            n_warmup_steps=p.n_warmup_steps,
            interval_steps=p.interval_steps,
        )
    if p.name == "successive_halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=p.min_resource or "auto")
    if p.name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=p.min_resource or 1, max_resource=p.max_resource or "auto"
        )
    return optuna.pruners.MedianPruner(
        n_startup_trials=p.n_startup_trials,
        n_warmup_steps=p.n_warmup_steps,
        interval_steps=p.interval_steps,
    )


def open_study(
    backend: BaseJournalBackend, spec: SweepSpec, *, create: bool = False
) -> optuna.Study:
    """The sweep's study on its journal, with a sampler seeded for the next trial."""
    storage = JournalStorage(backend)
    try:
        study = optuna.load_study(study_name=STUDY_NAME, storage=storage, pruner=make_pruner(spec))
    except KeyError:
        if not create:
            raise
        # Created only when missing: `create_study(load_if_exists=True)` would append a
        # create-study log to the journal on every call before finding the study exists.
        study = optuna.create_study(
            storage=storage,
            study_name=STUDY_NAME,
            direction=spec.direction,
            pruner=make_pruner(spec),
            load_if_exists=True,
        )
    study.sampler = make_sampler(spec, len(study.get_trials(deepcopy=False)))
    return study


def trial_handle(study: optuna.Study, number: int) -> optuna.Trial:
    """A live `optuna.Trial` for trial `number` (to report values and ask the pruner)."""
    frozen = study.get_trials(deepcopy=False)[number]
    return optuna.Trial(study, frozen._trial_id)
