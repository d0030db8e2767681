"""`respot sweep plot`: the study's optimization history and parameter importances, one PNG."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from respot.sweep.exceptions import SweepError

if TYPE_CHECKING:
    import optuna


def plot_study(study: optuna.Study, path: Path, *, title: str) -> Path:
    """Write the history (every finished trial, best so far) and the importances to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna

    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if not complete:
        raise SweepError("no trial has completed yet: nothing to plot")
    fig, (history, importance) = plt.subplots(1, 2, figsize=(13, 4.5))
    numbers = [t.number for t in complete]
    values = [t.value for t in complete if t.value is not None]
    best: list[float] = []
    for value in values:
        if not best:
            best.append(value)
        elif study.direction == optuna.study.StudyDirection.MINIMIZE:
            best.append(min(best[-1], value))
        else:
            best.append(max(best[-1], value))
    history.scatter(numbers, values, label="trial", color="tab:blue")
    history.step(numbers, best, where="post", label="best so far", color="tab:red")
    pruned = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,))
    for trial in pruned:
        history.axvline(trial.number, color="0.85", lw=1, zorder=0)
    history.set_xlabel("trial")
    history.set_ylabel("objective")
    history.set_title(f"optimization history ({len(pruned)} pruned: grey)")
    history.legend()
    if len(complete) >= 2:
        importances = optuna.importance.get_param_importances(study)
        names = list(importances)[::-1]
        importance.barh(names, [importances[n] for n in names], color="tab:green")
        importance.set_title("parameter importances (fANOVA)")
    else:
        importance.text(0.5, 0.5, "importances need 2 completed trials", ha="center")
        importance.set_axis_off()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
