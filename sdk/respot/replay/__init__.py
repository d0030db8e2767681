"""`respot replay`: the live control plane against a trace window, next to the simulator.

`plan` (the window, the time compression, the prediction, the live ledger in the
benchmark's units), `live` (the run on the local runtime) and `report` (the verdict).
"""

from respot.replay.plan import LiveCost, Prediction, ReplayPlan, predict
from respot.replay.report import DEFAULT_TOLERANCE, Comparison, compare

__all__ = [
    "DEFAULT_TOLERANCE",
    "Comparison",
    "LiveCost",
    "Prediction",
    "ReplayPlan",
    "compare",
    "predict",
]
